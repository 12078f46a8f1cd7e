#include "codec/gpu/host_containers.h"

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace kvt::codec::gpu {

absl::Status HostContainers::Reset(const ContainerLayout& layout, int num_pages) {
  KVT_RETURN_IF_ERROR(ValidateScheme(layout.scheme));
  KVT_RETURN_IF_ERROR(ValidatePageDims(layout.tokens, layout.channels, layout.chunk_tokens));
  if (num_pages < 1) return absl::InvalidArgumentError(absl::StrCat("num_pages must be positive, got ", num_pages));
  ContainerLayout shape = layout;
  shape.stream_crc.fill(0);
  ComputeLayout(shape);
  const size_t bytes = shape.total_bytes * static_cast<size_t>(num_pages);
  if (external_ && bytes > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat(num_pages, " containers of ", shape.total_bytes,
                                                     " bytes do not fit in the ", capacity_, " bytes given"));
  }
  if (bytes > capacity_) {
    pinned_buffer_.reset();
    std::vector<uint8_t>().swap(pageable_);
    base_ = nullptr;
    capacity_ = 0;
    if (pinned_) {
      absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> pinned = PinnedHostBuffer::Create(bytes);
      if (pinned.ok()) {  // else pageable: slower device copies, the same bytes
        pinned_buffer_ = *std::move(pinned);
        base_ = pinned_buffer_->data();
      }
    }
    if (base_ == nullptr) {
      pageable_.resize(bytes);
      base_ = pageable_.data();
    }
    capacity_ = bytes;
  }
  layout_ = shape;
  num_pages_ = num_pages;
  crcs_.assign(num_pages, {});
  return absl::OkStatus();
}

void HostContainers::Seal(int page) {
  uint8_t* c = data(page);
  std::array<uint32_t, kMaxStreams>& crc = crcs_[page];
  for (int s = 0; s < layout_.scheme.num_streams(); ++s) {
    const size_t skip = s == 0 ? layout_.header_bytes : 0;
    crc[s] = Crc32c(c + layout_.stream_offset[s] + skip, layout_.stream_length[s] - skip);
  }
  WriteContainerHeader(layout(page), c);
}

ContainerLayout HostContainers::layout(int page) const {
  ContainerLayout l = layout_;
  l.stream_crc = crcs_[page];
  return l;
}

}  // namespace kvt::codec::gpu
