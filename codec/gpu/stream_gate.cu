// StreamGate (stream_gate.h): a one-thread kernel polling mapped pinned host memory.
#include <cuda_runtime.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "codec/gpu/stream_gate.h"

namespace kvt::codec::gpu {
namespace {

__device__ __forceinline__ unsigned long long GlobalNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Returns once words[0] has reached `generation` (wrap-around safe) or `timeout_ns` have passed; in the latter
// case it records the generation in words[1].
__global__ void GateKernel(volatile uint32_t* words, uint32_t generation, unsigned long long timeout_ns) {
  const unsigned long long start = GlobalNs();
  while (static_cast<int32_t>(words[0] - generation) < 0) {
    if (GlobalNs() - start > timeout_ns) {
      words[1] = generation;
      __threadfence_system();
      return;
    }
    __nanosleep(500);
  }
}

absl::Status Failed(cudaError_t e, const char* what) {
  const std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StreamGate>> StreamGate::Create() {
  void* host = nullptr;
  cudaError_t e = cudaHostAlloc(&host, 2 * sizeof(uint32_t), cudaHostAllocMapped);
  if (e != cudaSuccess) return Failed(e, "cudaHostAlloc(mapped)");
  auto* words = static_cast<uint32_t*>(host);
  words[0] = words[1] = 0;
  void* device = nullptr;
  e = cudaHostGetDevicePointer(&device, host, 0);
  if (e != cudaSuccess) {
    cudaFreeHost(host);
    return Failed(e, "cudaHostGetDevicePointer");
  }
  return std::unique_ptr<StreamGate>(new StreamGate(words, static_cast<uint32_t*>(device)));
}

StreamGate::~StreamGate() {
  Open();  // a kernel still waiting returns; cudaFreeHost then waits for the device
  cudaFreeHost(words_);
}

absl::Status StreamGate::Close(CudaStream stream, int timeout_ms) {
  if (closed_) return absl::InvalidArgumentError("the gate is closed already: Open it first");
  if (timeout_ms <= 0) return absl::InvalidArgumentError(absl::StrCat("gate timeout ", timeout_ms, " ms"));
  const uint32_t next = generation_ + 1;
  GateKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      device_words_, next, static_cast<unsigned long long>(timeout_ms) * 1000000ull);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Failed(e, "launch of GateKernel");
  generation_ = next;
  closed_ = true;
  return absl::OkStatus();
}

void StreamGate::Open() {
  if (!closed_) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  reinterpret_cast<volatile uint32_t*>(words_)[0] = generation_;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  closed_ = false;
}

absl::Status StreamGate::Passed() const {
  if (generation_ == 0) return absl::FailedPreconditionError("the gate was never closed");
  if (reinterpret_cast<const volatile uint32_t*>(words_)[1] == generation_) {
    return absl::DeadlineExceededError(
        "the stream gate's kernel gave up waiting before the gate opened: the work behind it ran unheld");
  }
  return absl::OkStatus();
}

}  // namespace kvt::codec::gpu
