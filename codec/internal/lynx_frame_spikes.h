// Frame spikes (docs/FORMAT.md, version 4): each page-channel keeps a few values exactly, outside the frame
// [lo, hi] that its chunks' ends are quantized on, so that a sink token or an outlier does not widen the frame of
// every chunk of its channel. The rule, per channel, with k = LynxPageMeta::frame_spikes (< the page's tokens):
// order the channel's values by (value, token) ascending; for i = 0..k, removing the i first and the k - i last
// leaves the range S[n - 1 - (k - i)] - S[i] (in double); the spikes are the removal with the smallest range,
// the smallest i on ties. The encoder then codes the page with each spike replaced by the first value of its
// chunk-channel that is not a spike (every chunk keeps one: k < the chunk's tokens), and the decoder writes the
// spikes back over whatever that chunk-channel's codes decode to. One scalar definition for every CPU path.
#ifndef KVT_CODEC_INTERNAL_LYNX_FRAME_SPIKES_H_
#define KVT_CODEC_INTERNAL_LYNX_FRAME_SPIKES_H_

#include "absl/status/status.h"
#include "codec/internal/lynx_kernels.h"
#include "codec/page.h"

namespace kvt::codec::internal {

// Fills meta.frame_token / frame_value (meta.frame_spikes per channel, spike-major, each channel's tokens
// increasing) for a page of finite values. `avx512`: scan with AVX-512 (the same selection).
void SelectFrameSpikes(const PageView& page, bool avx512, LynxPageMeta& meta);

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
