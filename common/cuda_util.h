// Small RAII and Status wrappers over the CUDA runtime for kvt's GPU code, usable from g++ with no CUDA
// headers: device memory, streams as opaque handles, event timing, copies. Every cudaError_t becomes an
// absl::Status here (FAILED_PRECONDITION when no usable device or driver, INTERNAL otherwise).
// Objects are thread-compatible; the free functions are thread-safe.
#ifndef KVT_COMMON_CUDA_UTIL_H_
#define KVT_COMMON_CUDA_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvt {

// A cudaStream_t; a null handle is the legacy default stream. Does not own the stream.
struct CudaStream {
  void* handle = nullptr;
};

// A cudaError_t (as an int, so that callers need no CUDA headers) as a Status naming `what`: OK for cudaSuccess,
// FAILED_PRECONDITION when no usable device or driver, RESOURCE_EXHAUSTED when out of memory, INTERNAL otherwise.
absl::Status CudaErrorStatus(int cuda_error, const char* what);

// The number of CUDA devices, or the runtime's error (no driver, no device, driver too old) as a Status.
absl::StatusOr<int> CudaDeviceCount();
// CudaDeviceCount asked in a forked child, so this process itself never initialises CUDA: a process that forks
// its ranks (one per GPU) must not, since a child forked after CUDA was initialised cannot use it. 0 when the child
// finds no device or no driver, or cannot be forked.
int CudaDeviceCountInChild();
// "NVIDIA H100 80GB HBM3, 132 SMs, 50 MiB L2, driver 13000, runtime 13000" for device 0.
absl::StatusOr<std::string> CudaDeviceDescription();

// Device memory from cudaMalloc, freed on destruction.
class DeviceBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> Create(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  DeviceBuffer(void* ptr, size_t size) : ptr_(ptr), size_(size) {}
  void* ptr_;
  size_t size_;
};

// Page-locked host memory from cudaMallocHost, freed on destruction: copies to and from it are true DMA,
// asynchronous on their stream (pageable copies are staged through a driver buffer and block the host).
class PinnedHostBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> Create(size_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  uint8_t* data() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  PinnedHostBuffer(uint8_t* ptr, size_t size) : ptr_(ptr), size_(size) {}
  uint8_t* ptr_;
  size_t size_;
};

// A stream created with cudaStreamCreateWithFlags(non-blocking), destroyed on destruction.
class OwnedCudaStream {
 public:
  static absl::StatusOr<std::unique_ptr<OwnedCudaStream>> Create();
  ~OwnedCudaStream();
  CudaStream get() const { return CudaStream{handle_}; }

 private:
  explicit OwnedCudaStream(void* h) : handle_(h) {}
  void* handle_;
};

// A pair of CUDA events timing a stretch of one stream.
class CudaEventTimer {
 public:
  static absl::StatusOr<std::unique_ptr<CudaEventTimer>> Create();
  ~CudaEventTimer();
  absl::Status Start(CudaStream stream);
  absl::Status Stop(CudaStream stream);
  // Waits for the stop event; milliseconds between the two.
  absl::StatusOr<float> ElapsedMs();

 private:
  CudaEventTimer(void* a, void* b) : start_(a), stop_(b) {}
  void* start_;
  void* stop_;
};

// Asynchronous copies and fills on `stream` (host memory may be pageable; then the copy is synchronous).
absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, CudaStream stream = {});
absl::Status CopyToHost(void* dst, const void* src, size_t bytes, CudaStream stream = {});
// `rows` rows of `width` bytes, row r from src + r * src_pitch (device) to dst + r * dst_pitch (host): one strided
// DMA (cudaMemcpy2DAsync) instead of a copy per row.
absl::Status CopyToHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                          CudaStream stream = {});
// The same from host rows to device rows.
absl::Status CopyToDevice2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                            CudaStream stream = {});
absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, CudaStream stream = {});
// The same between device rows.
absl::Status CopyDeviceToDevice2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                  size_t rows, CudaStream stream = {});
absl::Status FillDevice(void* dst, int byte, size_t bytes, CudaStream stream = {});
absl::Status Synchronize(CudaStream stream = {});
// Whether everything enqueued on `stream` has finished (cudaStreamQuery), without waiting.
absl::StatusOr<bool> StreamIdle(CudaStream stream);
// The current device's streaming multiprocessors.
absl::StatusOr<int> MultiprocessorCount();

}  // namespace kvt

#endif  // KVT_COMMON_CUDA_UTIL_H_
