// Frame spikes (docs/FORMAT.md, version 4): each page-channel keeps a few values exactly, outside the frame
// [lo, hi] that its chunks' ends are quantized on, so that a sink token or an outlier does not widen the frame of
// every chunk of its channel. The rule, per channel, with k = LynxPageMeta::frame_spikes (< the page's tokens):
// order the channel's values by (value, token) ascending; for i = 0..k, removing the i first and the k - i last
// leaves the range S[n - 1 - (k - i)] - S[i] (in double); the spikes are the removal with the smallest range,
// the smallest i on ties. The encoder then codes the page with each spike replaced by the first value of its
// chunk-channel that is not a spike (every chunk keeps one: k < the chunk's tokens), and the decoder writes the
// spikes back over whatever that chunk-channel's codes decode to. One scalar definition for every CPU path.
//
// Two ways to the same bytes: SelectFrameSpikes + MaskFrameSpikes (the reference: a masked copy of the page that
// the statistics and codes then read), or, inside a statistics pass, ChunkExtremes + SelectChannelFrameSpikes
// (the k + 1 first values of a channel lie in the k + 1 chunks whose own least values come first, so the chunks'
// extremes, which that pass computes anyway, name them) and codes of the unmasked page with each spike's code
// then copied from its substitute (CopyFrameSpikeCodes).
#ifndef KVT_CODEC_INTERNAL_LYNX_FRAME_SPIKES_H_
#define KVT_CODEC_INTERNAL_LYNX_FRAME_SPIKES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "codec/internal/lynx_kernels.h"
#include "codec/options.h"
#include "codec/page.h"
#include "codec/scheme.h"

namespace kvt::codec::internal {

// What a statistics pass records per (chunk, channel), chunk-major like LynxPageMeta::q_low (entry k * channels +
// c): the chunk's least value, the first token within the chunk that holds it, and the least of its other values
// (equal to the least when the least occurs twice); the greatest, the last token that holds it and the greatest of
// the others; and, for mean centering, the chunk's sum of x * (1.0f / chunk_len) in token order (f32).
struct ChunkExtremes {
  std::vector<float> min, min2, max, max2, sum;
  std::vector<uint8_t> argmin, argmax;

  // Sizes every array for n chunk-channels (contents unspecified; sum only when `mean`).
  void Resize(size_t n, bool mean);
};

// The scalar statistics pass over channels [c_begin, c_end) (the channels a vector pass leaves over): fills their
// ChunkExtremes entries. Returns false, e unspecified, when one of their values is a NaN or an infinity.
bool ScanChunkExtremes(const PageView& page, const LynxPageMeta& meta, Centering centering, int c_begin, int c_end,
                       ChunkExtremes& e);

// A channel's candidate chunks: k + 1 chunk indices (k <= kMaxFrameSpikes).
using CandidateList = int[kMaxFrameSpikes + 1];

// Channel c's candidate chunks from its ChunkExtremes, scalar: bottom[0 .. m) the m = min(k + 1, num_chunks)
// chunks whose least values come first in (value, token) order, in that order; top[0 .. m) likewise from the
// greatest values, greatest first (the later token first among equal values). What a vector scan of the chunks
// may compute for 16 channels at a time instead.
void ChannelCandidateChunks(const ChunkExtremes& e, const LynxPageMeta& meta, int c, int* bottom, int* top);


// Channel c's frame spikes (meta.frame_token / frame_value) from its candidate chunks (ChannelCandidateChunks'
// order, meta.frame_spikes > 0), and meta.lo / hi of the page with them masked; then the chunks that hold a spike
// get the min, max (and, for kMean, sum) of their masked values in `e`. The page is read only for a candidate chunk
// whose next value may also come first (two of the first values in one chunk, or a tie with the last candidate's),
// for a chunk whose spikes are not just its own extremes, and for the masked chunks' sums (kMean).
void SelectChannelFrameSpikes(const PageView& page, Centering centering, const int* bottom, const int* top, int c,
                              ChunkExtremes& e, LynxPageMeta& meta);

// The codes of a page coded without its frame spikes masked, made the masked page's: each spike's code is set to
// its substitute's (the same chunk-channel's first non-spike value, so the same value coded with the same chunk
// parameters). `codes`: token-major code bytes; CopyFrameSpikeNibbles: the `num_streams` packed 4-bit streams.
void CopyFrameSpikeCodes(const LynxPageMeta& meta, uint8_t* codes);
void CopyFrameSpikeNibbles(const LynxPageMeta& meta, int num_streams, uint8_t* const* streams);

// Fills meta.frame_token / frame_value (meta.frame_spikes per channel, spike-major, each channel's tokens
// increasing) for a page of finite values, offering every value to per-channel lists: the reference.
void SelectFrameSpikes(const PageView& page, LynxPageMeta& meta);

// Writes into `masked` (a dense tokens x channels array) the page with every frame spike replaced by the first
// non-spike value of its chunk-channel, in token order.
void MaskFrameSpikes(const PageView& page, const LynxPageMeta& meta, float* masked);

// DATA_LOSS unless every frame spike of a decoded container is finite and its channel's tokens strictly
// increase and lie in the page (what SelectFrameSpikes writes).
absl::Status CheckFrameSpikes(const LynxPageMeta& meta);

// out(token, c) = value for every frame spike: the last step of a decode, at any stage.
void ApplyFrameSpikes(const LynxPageMeta& meta, const MutablePageView& out);

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_FRAME_SPIKES_H_
