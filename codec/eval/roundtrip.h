// The `kvtctl codec roundtrip` contract: a KV array of shape [T, C] (one layer's K or V) or [L, 2, T, H, D]
// (every layer's K and V) goes through the codec in pages of 256 tokens, per layer and per K/V, and comes back
// decoded at every stage, same shape, float32. Anyone can check kvt's fidelity on their own KV with it.
// Thread-compatible plain functions.
#ifndef KVT_CODEC_EVAL_ROUNDTRIP_H_
#define KVT_CODEC_EVAL_ROUNDTRIP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "codec/eval/npy.h"
#include "codec/eval/tensor_codec.h"

namespace kvt::codec::eval {

struct RoundTripResult {
  // stages[i]: decoded with streams [0, i]; the last is the full decode. Same shape as the input.
  std::vector<NpyArray> stages;
  // Wire bytes per stream over all pages (stream 0 includes the container headers and metadata).
  std::vector<size_t> stream_bytes;
};

// INVALID_ARGUMENT for a shape other than [T, C] or [L, 2, T, H, D]; codec errors with the layer, K/V and page
// in the message.
absl::StatusOr<RoundTripResult> RoundTrip(const NpyArray& x, const Scheme& scheme, const CodecOptions& options,
                                          int page_tokens = kDefaultPageTokens);

// The files `kvtctl codec roundtrip` writes for a scheme of `num_streams` streams: "<prefix>.stage<i>.npy" for
// every partial decode i = 0 .. num_streams - 2 (stage 0 = anchor only), then "<prefix>.full.npy".
// Single-stream schemes have no partial decode: only "<prefix>.full.npy".
std::vector<std::string> RoundTripFileNames(const std::string& prefix, int num_streams);

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_ROUNDTRIP_H_
