// The page plan of one request's transfer, computed the same way on both sides (docs/FORMAT.md): per layer,
// its K pages then its V pages, each page_tokens long, the tail split into a whole number of codec chunks and
// then a page shorter than one chunk (the codec's rule). Each page carries the byte length of every stream of
// its container, so the decode side can bound each chunk before anything arrives. Layer l travels as one
// data-plane transfer whose streams are (page index within the layer, stage). Plain value.
#ifndef KVT_KV_TRANSFER_PLAN_H_
#define KVT_KV_TRANSFER_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/scheme.h"
#include "kv/page_plan.h"

namespace kvt::kv {

struct PlannedPage {
  PageSpec spec;
  std::vector<uint64_t> stream_bytes;  // anchor first; stream 0 includes the container header
  uint64_t total_bytes() const;
};

struct TransferPlan {
  codec::Scheme scheme;
  int chunk_tokens = 0;
  uint32_t page_tokens = 0;
  uint32_t channels = 0;  // heads * head_dim of the source region
  uint64_t num_tokens = 0;
  std::vector<std::vector<PlannedPage>> layers;  // [layer][page]

  uint64_t total_bytes() const;
  uint64_t stream_bytes(int stream) const;  // summed over every page
};

// INVALID_ARGUMENT when the page dims do not suit the codec (channels out of range, chunk_tokens bad), or
// num_tokens / num_layers is zero or absurd (the message says which). target_page_tokens 0: the size kvtd picks
// when not told (codec::AutoPageTokens of `channels`).
absl::StatusOr<TransferPlan> MakeTransferPlan(const codec::Scheme& scheme, int chunk_tokens, uint32_t num_layers,
                                              uint64_t num_tokens, uint32_t target_page_tokens, uint32_t channels);

}  // namespace kvt::kv

#endif  // KVT_KV_TRANSFER_PLAN_H_
