// The KV regions clients registered with this daemon: each a validated layout over mapped memory. Requests
// hold a RegionLease while they read or write a region, and a leased region cannot be unregistered.
// Thread-safe.
#ifndef KVT_SERVER_REGION_REGISTRY_H_
#define KVT_SERVER_REGION_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cuda_ipc.h"
#include "common/mutex.h"
#include "kv/kv_layout.h"
#include "server/shm_region.h"

namespace kvt::server {

// One registered region: host shared memory, or device memory of another process (CUDA IPC). Immutable after
// registration.
class Region {
 public:
  Region(std::string id, kv::KvLayout layout, std::unique_ptr<ShmRegion> memory)
      : id_(std::move(id)), layout_(layout), memory_(std::move(memory)) {}
  Region(std::string id, kv::KvLayout layout, std::unique_ptr<IpcMapping> gpu_memory)
      : id_(std::move(id)), layout_(layout), gpu_memory_(std::move(gpu_memory)) {}

  const std::string& id() const { return id_; }
  const kv::KvLayout& layout() const { return layout_; }
  bool on_gpu() const { return gpu_memory_ != nullptr; }
  // Host regions: the whole mapped region; every access through it is checked by the page readers against its
  // size. Empty for GPU regions.
  absl::Span<uint8_t> bytes() const {
    return memory_ != nullptr ? *memory_->Bytes(0, memory_->size()) : absl::Span<uint8_t>();
  }
  // GPU regions: the mapped device memory and its device (null / -1 for host regions).
  void* device_data() const { return on_gpu() ? gpu_memory_->data() : nullptr; }
  int device() const { return on_gpu() ? gpu_memory_->device() : -1; }

 private:
  friend class RegionRegistry;
  friend class RegionLease;

  const std::string id_;
  const kv::KvLayout layout_;
  const std::unique_ptr<ShmRegion> memory_;
  const std::unique_ptr<IpcMapping> gpu_memory_;
  std::atomic<int> leases_{0};
};

// Keeps a region mapped and registered while held. Move-only.
class RegionLease {
 public:
  RegionLease() = default;
  explicit RegionLease(std::shared_ptr<Region> region);
  RegionLease(RegionLease&& o) noexcept : region_(std::move(o.region_)) {}
  RegionLease& operator=(RegionLease&& o) noexcept;
  ~RegionLease();

  const Region* operator->() const { return region_.get(); }
  const Region& operator*() const { return *region_; }
  explicit operator bool() const { return region_ != nullptr; }

 private:
  std::shared_ptr<Region> region_;
};

class RegionRegistry {
 public:
  // Maps `size_bytes` of shm segment `shm_name` and validates `layout` against it. INVALID_ARGUMENT for a bad
  // id, name or layout (the message names the field); ALREADY_EXISTS for a registered id; NOT_FOUND,
  // PERMISSION_DENIED or OUT_OF_RANGE from mapping the segment.
  absl::Status RegisterShm(const std::string& region_id, const kv::KvLayoutSpec& layout, const std::string& shm_name,
                           uint64_t size_bytes);
  // Opens a CUDA IPC handle to another process's device allocation on `device`, takes its bytes
  // [offset_bytes, offset_bytes + size_bytes) as the region and validates `layout` against them.
  // FAILED_PRECONDITION when this daemon has no such GPU; INVALID_ARGUMENT for a range outside the allocation;
  // errors as RegisterShm otherwise.
  absl::Status RegisterCudaIpc(const std::string& region_id, const kv::KvLayoutSpec& layout, const std::string& handle,
                               uint64_t size_bytes, int device, uint64_t offset_bytes = 0);
  // NOT_FOUND for an unknown id; FAILED_PRECONDITION while a request holds a lease on it.
  absl::Status Unregister(const std::string& region_id);
  // NOT_FOUND for an unknown id.
  absl::StatusOr<RegionLease> Acquire(const std::string& region_id) const;

  size_t size() const;

 private:
  // ALREADY_EXISTS if the id was registered meanwhile.
  absl::Status Publish(std::shared_ptr<Region> region);

  mutable kvt::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Region>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt::server

#endif  // KVT_SERVER_REGION_REGISTRY_H_
