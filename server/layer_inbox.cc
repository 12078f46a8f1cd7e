#include "server/layer_inbox.h"

#include "absl/strings/str_format.h"

namespace kvt::server {

absl::StatusOr<std::shared_ptr<LayerInbox>> LayerInbox::Create(absl::Span<const kv::PlannedPage> pages,
                                                               HostBufferPool& pool, HostMemory memory) {
  if (pages.empty()) return absl::InvalidArgumentError("a layer inbox needs at least one page");
  std::vector<size_t> offset(pages.size() + 1, 0);
  std::vector<std::vector<uint64_t>> stream_bytes;
  stream_bytes.reserve(pages.size());
  for (size_t p = 0; p < pages.size(); ++p) {
    offset[p + 1] = offset[p] + pages[p].total_bytes();
    stream_bytes.push_back(pages[p].stream_bytes);
  }
  std::shared_ptr<HostBuffer> buffer = pool.Acquire(offset.back(), memory);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "no host memory for a %d-byte layer inbox; lower the load or --host_buffer_pool_mib", offset.back()));
  }
  return std::shared_ptr<LayerInbox>(new LayerInbox(std::move(buffer), std::move(offset), std::move(stream_bytes)));
}

std::vector<transport::StreamBounds> LayerInbox::Bounds() const {
  std::vector<transport::StreamBounds> bounds;
  for (size_t p = 0; p < num_pages(); ++p) {
    uint64_t at = offset_[p];
    for (size_t s = 0; s < stream_bytes_[p].size(); ++s) {
      bounds.push_back({static_cast<uint32_t>(p), static_cast<uint8_t>(s), stream_bytes_[p][s], buffer_->data() + at});
      at += stream_bytes_[p][s];
    }
  }
  return bounds;
}

}  // namespace kvt::server
