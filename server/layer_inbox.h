// Where one layer of an inbound request lands on the decode daemon: one pooled host buffer (pinned when the GPU
// uploads from it) holding every page's container in plan order, back to back, each stream at its place in its
// container. The data plane writes the streams straight there (transport::StreamBounds::destination), the
// decoders read the containers from there, and the buffer goes back to the pool when the last holder (the
// request, a decode in progress, or the data plane finishing a read) lets go. Thread-compatible: it is immutable
// after Create; which bytes are stable when is the decode side's business (a stream is read only once complete).
#ifndef KVT_SERVER_LAYER_INBOX_H_
#define KVT_SERVER_LAYER_INBOX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kv/transfer_plan.h"
#include "server/host_buffer_pool.h"
#include "transport/transport.h"

namespace kvt::server {

class LayerInbox {
 public:
  // An inbox for `pages` (one layer's, plan order). RESOURCE_EXHAUSTED when no memory can be had.
  static absl::StatusOr<std::shared_ptr<LayerInbox>> Create(absl::Span<const kv::PlannedPage> pages, HostBufferPool& pool,
                                                            HostMemory memory);

  size_t num_pages() const { return offset_.size() - 1; }
  size_t bytes() const { return offset_.back(); }
  bool pinned() const { return buffer_->pinned(); }
  // Page `page`'s whole container (its streams in stage order, as the codec lays them out).
  absl::Span<const uint8_t> container(size_t page) const {
    return {buffer_->data() + offset_[page], offset_[page + 1] - offset_[page]};
  }
  // The layer's streams for Transport::Expect, each with its destination in this inbox. Pass the inbox (a
  // shared_ptr) as Expect's placement owner.
  std::vector<transport::StreamBounds> Bounds() const;

 private:
  LayerInbox(std::shared_ptr<HostBuffer> buffer, std::vector<size_t> offset,
             std::vector<std::vector<uint64_t>> stream_bytes)
      : buffer_(std::move(buffer)), offset_(std::move(offset)), stream_bytes_(std::move(stream_bytes)) {}

  const std::shared_ptr<HostBuffer> buffer_;
  const std::vector<size_t> offset_;                       // page p's container is [offset_[p], offset_[p + 1])
  const std::vector<std::vector<uint64_t>> stream_bytes_;  // per page, per stage
};

}  // namespace kvt::server

#endif  // KVT_SERVER_LAYER_INBOX_H_
