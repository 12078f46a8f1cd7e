// Runs the codec over a whole [tokens, channels] tensor (one layer's K or V) by splitting it into pages, as
// kvtd does: pages of `page_tokens` tokens; a last part that is not a whole number of chunks is split into a
// page of whole chunks and a final page shorter than one chunk (which the codec pads internally). Used by the
// evaluation and by `kvtctl codec roundtrip`. Thread-compatible plain functions.
//
//   KVT_ASSIGN_OR_RETURN(EncodedTensor enc, EncodeTensor(scheme, options, TensorView{k.data(), T, C}));
//   KVT_RETURN_IF_ERROR(DecodeTensor(enc, /*stages=*/1, options, k_anchor.data()));
#ifndef KVT_CODEC_EVAL_TENSOR_CODEC_H_
#define KVT_CODEC_EVAL_TENSOR_CODEC_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/codec.h"

namespace kvt::codec::eval {

// 0: kvtd's own page size (codec::AutoPageTokens), so that figures describe the pages kvtd sends.
inline constexpr int kDefaultPageTokens = 0;

// A dense [tokens, channels] float32 tensor, token-major. Does not own the data.
struct TensorView {
  const float* data = nullptr;
  int tokens = 0;
  int channels = 0;
};

// The pages a tensor of `tokens` tokens is cut into, as (first token, tokens). INVALID_ARGUMENT unless
// tokens >= 1 and page_tokens is a positive multiple of chunk_tokens. (EncodeTensor also takes page_tokens 0: kvtd's
// own choice, codec::AutoPageTokens of the tensor's channels; and options.chunk_tokens 0, the scheme's own chunk.)
absl::StatusOr<std::vector<std::pair<int, int>>> PlanPages(int tokens, int page_tokens, int chunk_tokens);

struct EncodedTensor {
  int tokens = 0;
  int channels = 0;
  int num_streams = 0;
  std::vector<std::pair<int, int>> pages;  // as PlanPages
  std::vector<EncodedPage> encoded;        // one per page

  // Bytes of stream `i` over all pages (stream 0 includes each container's header and metadata).
  size_t StreamBytes(int i) const;
  size_t num_values() const { return static_cast<size_t>(tokens) * channels; }
};

// Encodes every page. Errors from the codec are returned with the page's first token in the message.
absl::StatusOr<EncodedTensor> EncodeTensor(const Scheme& scheme, const CodecOptions& options,
                                           const TensorView& tensor, int page_tokens = kDefaultPageTokens);

// Decodes every page with its first `stages` streams into `out`, which must hold tokens * channels floats.
absl::Status DecodeTensor(const EncodedTensor& tensor, int stages, const CodecOptions& options, float* out);

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_TENSOR_CODEC_H_
