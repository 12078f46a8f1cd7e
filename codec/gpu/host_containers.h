// Encoded pages as finished containers, back to back in one host buffer (page-locked where it can be), so that
// the GPU encoder's results go from device memory straight into the bytes a data plane sends: the copy out of
// the device lays the streams down in container order, and Seal writes each page's CRCs and header in place.
// Not thread-safe, except that Seal may run concurrently for different pages.
//
//   HostContainers out(/*pinned=*/true);
//   KVT_RETURN_IF_ERROR(EncodePagesCudaInto(staging, out, scheme, options, kv, 256, block_ids, stream));
//   ... send out.stream(p, 0), then out.stream(p, 1) ...; `out` must outlive the sends
#ifndef KVT_CODEC_GPU_HOST_CONTAINERS_H_
#define KVT_CODEC_GPU_HOST_CONTAINERS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "codec/container.h"
#include "common/cuda_util.h"

namespace kvt::codec::gpu {

class HostContainers {
 public:
  // pinned: allocate page-locked memory (cudaMallocHost: the device copies into it by DMA, without blocking the
  // host); pageable memory when pinning fails or is not asked for. Allocates nothing until Reset.
  explicit HostContainers(bool pinned = true) : pinned_(pinned) {}
  // Lays the containers over `memory`, which the caller owns and keeps valid while this object is used (e.g. a
  // daemon's pooled pinned buffer holding a whole layer); Reset never allocates and fails with
  // RESOURCE_EXHAUSTED when the batch does not fit. pinned() says whether the caller said it is page-locked.
  HostContainers(absl::Span<uint8_t> memory, bool pinned)
      : pinned_(pinned), external_(true), base_(memory.data()), capacity_(memory.size()) {}
  HostContainers(const HostContainers&) = delete;
  HostContainers& operator=(const HostContainers&) = delete;

  // Makes room for `num_pages` containers of `layout`'s scheme and page shape (its stream table is recomputed;
  // CRCs are ignored), keeping the buffer when it is large enough. Every page is unsealed afterwards and its bytes
  // undefined. INVALID_ARGUMENT for a layout the container format rejects or num_pages < 1.
  absl::Status Reset(const ContainerLayout& layout, int num_pages);

  int num_pages() const { return num_pages_; }
  // Bytes of one container (all pages have the same shape).
  size_t container_bytes() const { return layout_.total_bytes; }
  // Bytes allocated, whatever Reset asked for last.
  size_t capacity() const { return capacity_; }
  bool pinned() const { return external_ ? pinned_ : pinned_buffer_ != nullptr; }

  // Page `page`'s container, to be filled (its header bytes are Seal's).
  uint8_t* data(int page) { return base_ + static_cast<size_t>(page) * layout_.total_bytes; }

  // Computes page `page`'s stream CRCs and writes its header: its container is then complete. Call once its
  // payload is in place; pages may be sealed concurrently, and sealing again after the payload changed is fine.
  void Seal(int page);

  // Page `page`'s whole container, and its stream `s` (stream 0 begins with the header), as sent. Valid until the
  // next Reset or destruction.
  absl::Span<const uint8_t> container(int page) const {
    return {base_ + static_cast<size_t>(page) * layout_.total_bytes, layout_.total_bytes};
  }
  absl::Span<const uint8_t> stream(int page, int s) const {
    return container(page).subspan(layout_.stream_offset[s], layout_.stream_length[s]);
  }
  // Page `page`'s layout with the CRCs Seal computed (zero before).
  ContainerLayout layout(int page) const;
  // The shape every page shares (CRCs zero).
  const ContainerLayout& shape() const { return layout_; }

 private:
  const bool pinned_;              // asked to pin (own memory), or said to be pinned (the caller's)
  const bool external_ = false;  // base_ is the caller's memory
  std::unique_ptr<PinnedHostBuffer> pinned_buffer_;
  std::vector<uint8_t> pageable_;
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0;
  ContainerLayout layout_;
  int num_pages_ = 0;
  std::vector<std::array<uint32_t, kMaxStreams>> crcs_;  // per page, Seal's
};

}  // namespace kvt::codec::gpu

#endif  // KVT_CODEC_GPU_HOST_CONTAINERS_H_
