// One layer's encoded pages as the prefill daemon hands them to the data plane: each page's streams, and whatever
// keeps their bytes alive until the send is done (the CPU codec's containers, or the GPU path's pinned buffers,
// which go back to their pool when the layer is destroyed). Immutable after construction; movable.
#ifndef KVT_SERVER_ENCODED_LAYER_H_
#define KVT_SERVER_ENCODED_LAYER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "codec/codec.h"

namespace kvt::server {

class EncodedLayer {
 public:
  EncodedLayer() = default;
  // The CPU codec's containers, owned by the layer.
  explicit EncodedLayer(std::vector<codec::EncodedPage> pages);
  // Pages whose bytes `owner` keeps alive: streams[p] is page p's streams in stage order.
  EncodedLayer(std::vector<std::vector<absl::Span<const uint8_t>>> streams, std::shared_ptr<const void> owner)
      : streams_(std::move(streams)), owner_(std::move(owner)) {}

  size_t num_pages() const { return streams_.size(); }
  // Page `page`'s streams (stream 0 begins with the container header), valid while this layer lives.
  absl::Span<const absl::Span<const uint8_t>> streams(size_t page) const { return streams_[page]; }

 private:
  std::vector<std::vector<absl::Span<const uint8_t>>> streams_;
  std::shared_ptr<const void> owner_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_ENCODED_LAYER_H_
