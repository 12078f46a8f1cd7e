// The frame spikes' candidate chunks (lynx_frame_spikes.h, ChannelCandidateChunks) of 16 channels a lane, kept
// while a pass visits a page's chunks in order, so that the AVX-512 statistics pass can offer each chunk's
// extremes while they are in registers instead of a later pass re-reading the chunk arrays a channel stride apart.
// AVX-512 only (Offer requires ImplAvailable(kAvx512)); one object per thread.
#ifndef KVT_CODEC_INTERNAL_LYNX_CANDIDATE_LANES_H_
#define KVT_CODEC_INTERNAL_LYNX_CANDIDATE_LANES_H_

#include <immintrin.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "codec/internal/lynx_avx512_common.h"
#include "codec/internal/lynx_frame_spikes.h"
#include "codec/scheme.h"

namespace kvt::codec::internal {

// Per 16-channel group g (channels 16 g .. 16 g + 15), two lists of `keep` (value, chunk) entries a lane: the
// least chunk values ascending and the greatest descending, ties by chunk as ChannelCandidateChunks orders them.
class CandidateLanes {
 public:
  static constexpr int kMaxList = kMaxFrameSpikes + 1;

  // Empties the lists of `groups` groups, each `keep` (1..kMaxList) entries long.
  void Reset(int groups, int keep) {
    keep_ = keep;
    groups_.resize(static_cast<size_t>(groups));
    for (Group& s : groups_) {
      for (int j = 0; j < keep; ++j) {
        for (int l = 0; l < 16; ++l) {
          s.low_x[j][l] = std::numeric_limits<float>::infinity();
          s.low_chunk[j][l] = std::numeric_limits<int32_t>::max();
          s.high_x[j][l] = -std::numeric_limits<float>::infinity();
          s.high_chunk[j][l] = -1;
        }
      }
    }
  }

  // Offers chunk `chunk`, later than every chunk offered to group g since Reset, whose 16 channels' least values
  // are `mn` and greatest `mx` (after a NaN the lists are unspecified, not undefined).
  KVT_AVX512 void Offer(int g, __m512 mn, __m512 mx, int chunk) {
    Group& s = groups_[static_cast<size_t>(g)];
    // A later chunk enters a list only below its last value (low) or at or above it (high).
    const __mmask16 into_low = _mm512_cmp_ps_mask(mn, _mm512_load_ps(s.low_x[keep_ - 1]), _CMP_LT_OQ);
    const __mmask16 into_high = _mm512_cmp_ps_mask(mx, _mm512_load_ps(s.high_x[keep_ - 1]), _CMP_GE_OQ);
    const __m512i t = _mm512_set1_epi32(chunk);
    if (into_low) InsertLater<true>(s.low_x, s.low_chunk, mn, t, into_low);
    if (into_high) InsertLater<false>(s.high_x, s.high_chunk, mx, t, into_high);
  }

  // Group g's lists: lane l's least chunks at bottom[l][0 .. keep), greatest at top[l][0 .. keep).
  void Read(int g, CandidateList* bottom, CandidateList* top) const {
    const Group& s = groups_[static_cast<size_t>(g)];
    for (int l = 0; l < 16; ++l) {
      for (int j = 0; j < keep_; ++j) bottom[l][j] = s.low_chunk[j][l], top[l][j] = s.high_chunk[j][l];
    }
  }

 private:
  struct alignas(64) Group {
    float low_x[kMaxList][16];
    int32_t low_chunk[kMaxList][16];
    float high_x[kMaxList][16];
    int32_t high_chunk[kMaxList][16];
  };

  // Puts each `valid` lane's entry in its place in lists sorted ascending (kUp) or descending and drops the last:
  // the entry is later than every entry held (equal values: ahead at the top, behind at the bottom), so the value
  // compare alone places it; below that place the held entries move down one each. The lists being sorted, "the
  // new entry goes before entry j" holds from its place on, so no position's moves wait on another's.
  template <bool kUp>
  KVT_AVX512 void InsertLater(float (*x)[16], int32_t (*c)[16], __m512 nx, __m512i nc, __mmask16 valid) {
    __m512 px = nx;  // what position j takes where the entry goes before j - 1: entry j - 1
    __m512i pc = nc;
    __mmask16 before_prev = 0;
    for (int j = 0; j < keep_; ++j) {
      const __m512 sx = _mm512_load_ps(x[j]);
      const __m512i sc = _mm512_load_si512(c[j]);
      const __mmask16 before =
          kUp ? _mm512_mask_cmp_ps_mask(valid, nx, sx, _CMP_LT_OQ) : _mm512_mask_cmp_ps_mask(valid, nx, sx, _CMP_GE_OQ);
      _mm512_store_ps(x[j], _mm512_mask_mov_ps(sx, before, _mm512_mask_mov_ps(nx, before_prev, px)));
      _mm512_store_si512(c[j], _mm512_mask_mov_epi32(sc, before, _mm512_mask_mov_epi32(nc, before_prev, pc)));
      px = sx;
      pc = sc;
      before_prev = before;
    }
  }

  int keep_ = 0;
  std::vector<Group> groups_;
};

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_CANDIDATE_LANES_H_
