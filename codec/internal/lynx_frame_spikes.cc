#include "codec/internal/lynx_frame_spikes.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/scheme.h"

#define KVT_FRAME_AVX512 __attribute__((target("avx512f")))

namespace kvt::codec::internal {
namespace {

constexpr int kMaxList = kMaxFrameSpikes + 1;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Entry {
  float x;
  int t;
};

// Per channel, the k + 1 first and the k + 1 last values of the (value, token) order seen so far, and the
// thresholds a new (later) token must pass to enter them: x < bottom_cut (its value below the last kept; an
// equal value sorts after, being later) and x >= top_cut. The cuts stay +-inf until a list is full.
class Extremes {
 public:
  Extremes(int channels, int keep)
      : keep_(keep),
        bottom_(static_cast<size_t>(channels) * kMaxList),
        top_(bottom_.size()),
        bottom_n_(channels, 0),
        top_n_(channels, 0),
        bottom_cut_(channels, kInf),
        top_cut_(channels, -kInf) {}

  // Offers value x of token t (later than every token offered before) in channel c.
  void Offer(int c, float x, int t) {
    if (x < bottom_cut_[c]) InsertBottom(c, x, t);
    if (x >= top_cut_[c]) InsertTop(c, x, t);
  }

  const Entry* bottom(int c) const { return &bottom_[static_cast<size_t>(c) * kMaxList]; }
  const Entry* top(int c) const { return &top_[static_cast<size_t>(c) * kMaxList]; }
  // Channel c's whole lists, found another way (VectorExtremes).
  void Set(int c, const Entry* bottom, const Entry* top) {
    std::copy_n(bottom, keep_, &bottom_[static_cast<size_t>(c) * kMaxList]);
    std::copy_n(top, keep_, &top_[static_cast<size_t>(c) * kMaxList]);
    bottom_n_[c] = top_n_[c] = keep_;
  }

 private:
  void InsertBottom(int c, float x, int t) {
    Entry* list = &bottom_[static_cast<size_t>(c) * kMaxList];
    int n = bottom_n_[c];
    int at = n;
    while (at > 0 && list[at - 1].x > x) --at;  // ascending; an equal value stays ahead (earlier token)
    if (n == keep_) --n;                         // the last falls off
    for (int j = n; j > at; --j) list[j] = list[j - 1];
    list[at] = Entry{x, t};
    bottom_n_[c] = n + 1;
    if (n + 1 == keep_) bottom_cut_[c] = list[keep_ - 1].x;
  }
  void InsertTop(int c, float x, int t) {
    Entry* list = &top_[static_cast<size_t>(c) * kMaxList];
    int n = top_n_[c];
    int at = n;
    while (at > 0 && list[at - 1].x <= x) --at;  // descending; an equal value goes ahead (later token)
    if (n == keep_) --n;
    for (int j = n; j > at; --j) list[j] = list[j - 1];
    list[at] = Entry{x, t};
    top_n_[c] = n + 1;
    if (n + 1 == keep_) top_cut_[c] = list[keep_ - 1].x;
  }

  int keep_;
  std::vector<Entry> bottom_, top_;
  std::vector<int> bottom_n_, top_n_;
  std::vector<float> bottom_cut_, top_cut_;
};

void ScanRowScalar(const float* row, int t, int c_begin, int c_end, Extremes& e) {
  for (int c = c_begin; c < c_end; ++c) e.Offer(c, row[c], t);
}

// Sixteen channels' lists of kKeep (value, token) entries, one channel a lane, sorted by (value, token)
// ascending (kUp) or descending; Insert puts each lane's new entry in its place (where `valid`) and drops the
// last: a compare-and-swap pass, no branches.
template <int kKeep, bool kUp>
struct LaneLists {
  __m512 x[kKeep];
  __m512i t[kKeep];
  KVT_FRAME_AVX512 void Clear() {
    for (int j = 0; j < kKeep; ++j) {
      x[j] = _mm512_set1_ps(kUp ? kInf : -kInf);
      t[j] = _mm512_set1_epi32(kUp ? std::numeric_limits<int>::max() : -1);
    }
  }
  KVT_FRAME_AVX512 void Insert(__m512 nx, __m512i nt, __mmask16 valid) {
    for (int j = 0; j < kKeep; ++j) {
      const __mmask16 tie = _mm512_cmp_ps_mask(nx, x[j], _CMP_EQ_OQ);
      const __mmask16 before =
          valid & (kUp ? _mm512_cmp_ps_mask(nx, x[j], _CMP_LT_OQ) | (tie & _mm512_cmplt_epi32_mask(nt, t[j]))
                       : _mm512_cmp_ps_mask(nx, x[j], _CMP_GT_OQ) | (tie & _mm512_cmpgt_epi32_mask(nt, t[j])));
      const __m512 sx = x[j];
      const __m512i st = t[j];
      x[j] = _mm512_mask_mov_ps(x[j], before, nx);
      t[j] = _mm512_mask_mov_epi32(t[j], before, nt);
      nx = _mm512_mask_mov_ps(nx, before, sx);
      nt = _mm512_mask_mov_epi32(nt, before, st);
    }
  }
};

// The lists of channels [c0, c0 + 16) without offering every value: the k + 1 first values of a channel's (value,
// token) order lie in the k + 1 groups of rows whose own first values come first in that order (any other group
// has k + 1 values before its first), and likewise at the top, for any split of the tokens into groups. So: every
// group's first and last entries (one pass, vector compares), the kKeep groups of each side from those, then only
// those groups' values (gathers, the costly part: so the groups are short, kGroupRows rows).
constexpr int kGroupRows = 4;
template <int kKeep>
KVT_FRAME_AVX512 void VectorExtremes(const PageView& page, int c0, Extremes& e) {
  const size_t stride = page.stride();
  const int rows = page.tokens % kGroupRows == 0 ? kGroupRows : 1;  // groups of rows that tile the page
  const int groups = page.tokens / rows;
  LaneLists<kKeep, true> low;
  LaneLists<kKeep, false> high;
  low.Clear();
  high.Clear();
  for (int k = 0; k < groups; ++k) {
    const int t0 = k * rows;
    __m512 mn = _mm512_loadu_ps(page.data + static_cast<size_t>(t0) * stride + c0), mx = mn;
    __m512i tmn = _mm512_set1_epi32(t0), tmx = tmn;
    for (int r = 1; r < rows; ++r) {
      const __m512 x = _mm512_loadu_ps(page.data + static_cast<size_t>(t0 + r) * stride + c0);
      const __m512i t = _mm512_set1_epi32(t0 + r);
      const __mmask16 lt = _mm512_cmp_ps_mask(x, mn, _CMP_LT_OQ);  // the first of equal values stays
      const __mmask16 ge = _mm512_cmp_ps_mask(x, mx, _CMP_GE_OQ);  // the last of equal values wins
      mn = _mm512_mask_mov_ps(mn, lt, x);
      tmn = _mm512_mask_mov_epi32(tmn, lt, t);
      mx = _mm512_mask_mov_ps(mx, ge, x);
      tmx = _mm512_mask_mov_epi32(tmx, ge, t);
    }
    // A group's entries come after every earlier group's in token order: they enter a full list only below its
    // last value (low) or at or above it (high), and mostly do not, so the insert is skipped when no lane needs it.
    const __mmask16 into_low = _mm512_cmp_ps_mask(mn, low.x[kKeep - 1], _CMP_LT_OQ);
    const __mmask16 into_high = _mm512_cmp_ps_mask(mx, high.x[kKeep - 1], _CMP_GE_OQ);
    if (into_low) low.Insert(mn, tmn, into_low);
    if (into_high) high.Insert(mx, tmx, into_high);
  }
  // The candidate groups' values, ordered afresh: lane l reads channel c0 + l of token t.
  auto gather = [&](__m512i t) KVT_FRAME_AVX512 {
    alignas(64) int tok[16];
    alignas(64) float v[16];
    _mm512_store_si512(tok, t);
    for (int l = 0; l < 16; ++l) v[l] = page.data[static_cast<size_t>(tok[l]) * stride + c0 + l];
    return _mm512_load_ps(v);
  };
  LaneLists<kKeep, true> bottom;
  LaneLists<kKeep, false> top;
  bottom.Clear();
  top.Clear();
  alignas(64) int first[16];
  for (int j = 0; j < kKeep; ++j) {
    for (int side = 0; side < 2; ++side) {
      _mm512_store_si512(first, side == 0 ? low.t[j] : high.t[j]);
      __mmask16 valid = 0;
      for (int l = 0; l < 16; ++l) {
        const bool ok = first[l] >= 0 && first[l] < page.tokens;
        valid |= static_cast<__mmask16>(ok) << l;
        first[l] = ok ? first[l] / rows * rows : 0;
      }
      const __m512i start = _mm512_load_si512(first);
      for (int r = 0; r < rows; ++r) {
        const __m512i t = _mm512_add_epi32(start, _mm512_set1_epi32(r));
        const __m512 x = gather(t);
        if (side == 0) {
          bottom.Insert(x, t, valid);
        } else {
          top.Insert(x, t, valid);
        }
      }
    }
  }
  alignas(64) float bx[kKeep][16], tx[kKeep][16];
  alignas(64) int bt[kKeep][16], tt[kKeep][16];
  for (int j = 0; j < kKeep; ++j) {
    _mm512_store_ps(bx[j], bottom.x[j]);
    _mm512_store_si512(bt[j], bottom.t[j]);
    _mm512_store_ps(tx[j], top.x[j]);
    _mm512_store_si512(tt[j], top.t[j]);
  }
  for (int l = 0; l < 16; ++l) {
    Entry b[kMaxList], t[kMaxList];
    for (int j = 0; j < kKeep; ++j) b[j] = Entry{bx[j][l], bt[j][l]}, t[j] = Entry{tx[j][l], tt[j][l]};
    e.Set(c0 + l, b, t);
  }
}

// VectorExtremes over every whole vector of channels; returns the first channel it did not take.
KVT_FRAME_AVX512 int VectorChannels(const PageView& page, int keep, Extremes& e) {
  int c0 = 0;
  for (; c0 + 16 <= page.channels; c0 += 16) {
    switch (keep) {
      case 2: VectorExtremes<2>(page, c0, e); break;
      case 3: VectorExtremes<3>(page, c0, e); break;
      case 4: VectorExtremes<4>(page, c0, e); break;
      case 5: VectorExtremes<5>(page, c0, e); break;
      case 6: VectorExtremes<6>(page, c0, e); break;
      case 7: VectorExtremes<7>(page, c0, e); break;
      default: VectorExtremes<8>(page, c0, e); break;
    }
  }
  return c0;
}

}  // namespace

void SelectFrameSpikes(const PageView& page, bool avx512, LynxPageMeta& meta) {
  const int k = meta.frame_spikes;
  const int channels = page.channels;
  if (k == 0) return;
  Extremes e(channels, k + 1);
  // The vector path's channels, then the rest offered value by value (the same lists either way).
  const int c0 = avx512 ? VectorChannels(page, k + 1, e) : 0;
  for (int t = 0; t < page.tokens && c0 < channels; ++t) {
    ScanRowScalar(page.data + static_cast<size_t>(t) * page.stride(), t, c0, channels, e);
  }
  int tokens[kMaxFrameSpikes];
  for (int c = 0; c < channels; ++c) {
    const Entry* bottom = e.bottom(c);  // S[0..k]
    const Entry* top = e.top(c);        // S[n-1], S[n-2], ..., S[n-1-k]
    int best = 0;
    double best_range = 0;
    for (int i = 0; i <= k; ++i) {
      const double range = static_cast<double>(top[k - i].x) - static_cast<double>(bottom[i].x);
      if (i == 0 || range < best_range) {
        best = i;
        best_range = range;
      }
    }
    int m = 0;
    for (int j = 0; j < best; ++j) tokens[m++] = bottom[j].t;
    for (int j = 0; j < k - best; ++j) tokens[m++] = top[j].t;
    for (int i = 1; i < k; ++i) {  // by token (insertion sort: k <= 7)
      for (int j = i; j > 0 && tokens[j - 1] > tokens[j]; --j) std::swap(tokens[j - 1], tokens[j]);
    }
    for (int j = 0; j < k; ++j) {
      const size_t s = static_cast<size_t>(j) * channels + c;
      meta.frame_token[s] = static_cast<uint16_t>(tokens[j]);
      meta.frame_value[s] = page.at(tokens[j], c);
    }
  }
}

void MaskFrameSpikes(const PageView& page, const LynxPageMeta& meta, float* masked) {
  const size_t channels = static_cast<size_t>(page.channels);
  for (int t = 0; t < page.tokens; ++t) {
    std::copy_n(page.data + static_cast<size_t>(t) * page.stride(), channels, masked + t * channels);
  }
  const int k = meta.frame_spikes;
  for (int c = 0; c < page.channels; ++c) {
    for (int j = 0; j < k; ++j) {
      const int t = meta.frame_token[static_cast<size_t>(j) * channels + c];
      // The first token of t's chunk that is not a spike (the channel's spike tokens increase with j).
      const int t0 = t / meta.chunk_len * meta.chunk_len;
      int r = t0;
      for (int i = 0; i < k; ++i) {
        if (meta.frame_token[static_cast<size_t>(i) * channels + c] == r) ++r;
      }
      masked[static_cast<size_t>(t) * channels + c] = page.at(r, c);
    }
  }
}

absl::Status CheckFrameSpikes(const LynxPageMeta& meta) {
  const size_t channels = static_cast<size_t>(meta.channels);
  for (int c = 0; c < meta.channels; ++c) {
    int last = -1;
    for (int j = 0; j < meta.frame_spikes; ++j) {
      const size_t s = j * channels + c;
      const int t = meta.frame_token[s];
      if (t <= last || t >= meta.tokens || !std::isfinite(meta.frame_value[s])) {
        return absl::DataLossError(absl::StrCat("lynx container: bad frame spike ", j, " of channel ", c, " (token ",
                                                t, ", value ", meta.frame_value[s], ") in a ", meta.tokens,
                                                "-token page"));
      }
      last = t;
    }
  }
  return absl::OkStatus();
}

void ApplyFrameSpikes(const LynxPageMeta& meta, const MutablePageView& out) {
  const size_t channels = static_cast<size_t>(meta.channels);
  for (int j = 0; j < meta.frame_spikes; ++j) {
    for (int c = 0; c < meta.channels; ++c) {
      const size_t s = j * channels + c;
      out.at(meta.frame_token[s], c) = meta.frame_value[s];
    }
  }
}

}  // namespace kvt::codec::internal
