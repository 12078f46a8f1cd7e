// Sharing device memory between processes with CUDA IPC (docs/DAEMON.md, "GPU regions"): an engine exports a handle to
// its KV cache's allocation; kvtd opens it and reads and writes the engine's blocks in place, with no copy through the
// engine's process. Plain C++ (no CUDA headers). Without a usable GPU every call fails with FAILED_PRECONDITION.
// Thread-safe (IpcMapping is immutable after Open).
#ifndef KVT_COMMON_CUDA_IPC_H_
#define KVT_COMMON_CUDA_IPC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvt {

// Size of a cudaIpcMemHandle_t.
inline constexpr size_t kCudaIpcHandleBytes = 64;
// What a region's offset inside its allocation must be a multiple of (IpcMapping::Open): the kernels' vector width.
// Caching allocators hand out 512-byte aligned blocks.
inline constexpr uint64_t kCudaIpcOffsetAlignment = 16;

// The IPC handle of the allocation that starts at `device_ptr` (from cudaMalloc) on `device`, as bytes.
absl::StatusOr<std::string> ExportCudaIpcHandle(void* device_ptr, int device);

// Makes `device` current for the calling thread (kernels and copies then run there).
absl::Status UseCudaDevice(int device);

// Another process's device allocation, mapped into this one. Closed on destruction.
class IpcMapping {
 public:
  // Maps the allocation `handle` names and exposes its bytes [offset_bytes, offset_bytes + size_bytes).
  // INVALID_ARGUMENT for a handle that is not kCudaIpcHandleBytes long, size 0, an offset that is not a multiple of
  // kCudaIpcOffsetAlignment, or a range that overflows or does not fit in the allocation; FAILED_PRECONDITION when this
  // process has no such device (or no GPU at all); the runtime's error for a handle it cannot open (e.g. one exported
  // by this same process, which CUDA does not allow).
  static absl::StatusOr<std::unique_ptr<IpcMapping>> Open(const std::string& handle, uint64_t size_bytes, int device,
                                                          uint64_t offset_bytes = 0);
  ~IpcMapping();
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;

  // The region: the allocation's base plus the offset asked for.
  void* data() const { return static_cast<char*>(base_) + offset_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }

 private:
  IpcMapping(void* base, uint64_t offset, uint64_t size, int device)
      : base_(base), offset_(offset), size_(size), device_(device) {}
  void* const base_;  // what cudaIpcOpenMemHandle returned, closed on destruction
  const uint64_t offset_;
  const uint64_t size_;
  const int device_;
};

}  // namespace kvt

#endif  // KVT_COMMON_CUDA_IPC_H_
