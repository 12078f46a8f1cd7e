// StreamGate (stream_gate.h): a one-thread kernel polling mapped pinned host memory.
#include <cuda_runtime.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/stream_gate.h"

namespace kvt {
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

}  // namespace

void StreamGate::FreeHost::operator()(uint32_t* p) const { cudaFreeHost(p); }
void StreamGate::DestroyEvent::operator()(void* e) const { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }

absl::StatusOr<std::unique_ptr<StreamGate>> StreamGate::Create() {
  void* host = nullptr;
  cudaError_t e = cudaHostAlloc(&host, 2 * sizeof(uint32_t), cudaHostAllocMapped);
  if (e != cudaSuccess) return CudaErrorStatus(e, "cudaHostAlloc(mapped)");
  std::unique_ptr<uint32_t, FreeHost> words(static_cast<uint32_t*>(host));
  words.get()[0] = words.get()[1] = 0;
  void* device = nullptr;
  e = cudaHostGetDevicePointer(&device, host, 0);
  if (e != cudaSuccess) return CudaErrorStatus(e, "cudaHostGetDevicePointer");
  cudaEvent_t event = nullptr;
  e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (e != cudaSuccess) return CudaErrorStatus(e, "cudaEventCreateWithFlags");
  std::unique_ptr<void, DestroyEvent> passed(event);
  return std::unique_ptr<StreamGate>(
      new StreamGate(std::move(words), static_cast<uint32_t*>(device), std::move(passed)));
}

StreamGate::~StreamGate() {
  Open();  // a kernel still waiting returns
  if (generation_ != 0) cudaEventSynchronize(static_cast<cudaEvent_t>(passed_.get()));  // before the words go
}

absl::Status StreamGate::Close(CudaStream stream, int timeout_ms) {
  if (closed_) return absl::FailedPreconditionError("the gate is closed already: Open it first");
  if (timeout_ms <= 0) return absl::InvalidArgumentError(absl::StrCat("gate timeout ", timeout_ms, " ms"));
  uint32_t next = generation_ + 1;
  volatile uint32_t* words = device_words_;
  unsigned long long timeout_ns = static_cast<unsigned long long>(timeout_ms) * 1000000ull;
  void* args[] = {&words, &next, &timeout_ns};
  const auto s = static_cast<cudaStream_t>(stream.handle);
  // cudaLaunchKernel returns this launch's own error (cudaGetLastError could return an earlier one's, and the
  // kernel, queued after all, would then wait out its deadline).
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(&GateKernel), dim3(1), dim3(1), args, 0, s);
  if (e != cudaSuccess) {
    cudaGetLastError();  // returned here
    return CudaErrorStatus(e, "launch of GateKernel");
  }
  generation_ = next;
  closed_ = true;
  const cudaError_t r = cudaEventRecord(static_cast<cudaEvent_t>(passed_.get()), s);
  if (r != cudaSuccess) {
    Open();
    return CudaErrorStatus(r, "cudaEventRecord");
  }
  return absl::OkStatus();
}

void StreamGate::Open() {
  if (!closed_) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  reinterpret_cast<volatile uint32_t*>(words_.get())[0] = generation_;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  closed_ = false;
}

absl::Status StreamGate::Passed() const {
  if (generation_ == 0) return absl::FailedPreconditionError("the gate was never closed");
  if (reinterpret_cast<const volatile uint32_t*>(words_.get())[1] == generation_) {
    return absl::DeadlineExceededError(
        "the stream gate's kernel gave up waiting before the gate opened: the work behind it ran unheld");
  }
  return absl::OkStatus();
}

}  // namespace kvt
