// CUDA runtime wrappers (cuda_util.h): the one place outside the kernels that sees cudaError_t.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cuda_util.h"

namespace kvt {
namespace {

cudaStream_t S(CudaStream s) { return static_cast<cudaStream_t>(s.handle); }

absl::Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorNoKernelImageForDevice:
      return absl::FailedPreconditionError(msg);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace

absl::Status CudaErrorStatus(int cuda_error, const char* what) {
  return FromCuda(static_cast<cudaError_t>(cuda_error), what);
}

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last-error state so later calls do not report this one
    return FromCuda(e, "cudaGetDeviceCount");
  }
  return n;
}

int CudaDeviceCountInChild() {
  const pid_t pid = fork();
  if (pid == 0) {
    absl::StatusOr<int> n = CudaDeviceCount();
    _exit(n.ok() ? std::min(*n, 100) : 0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

absl::StatusOr<std::string> CudaDeviceDescription() {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess) return FromCuda(e, "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return absl::StrCat(p.name, ", ", p.multiProcessorCount, " SMs, ", p.l2CacheSize >> 20, " MiB L2, ",
                      p.totalGlobalMem >> 30, " GiB, cc ", p.major, ".", p.minor, ", driver ", driver,
                      ", runtime ", runtime);
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Create(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) return FromCuda(e, absl::StrCat("cudaMalloc(", bytes, ")").c_str());
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(p, bytes));
}

DeviceBuffer::~DeviceBuffer() { cudaFree(ptr_); }

absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> PinnedHostBuffer::Create(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMallocHost(&p, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) return FromCuda(e, absl::StrCat("cudaMallocHost(", bytes, ")").c_str());
  return std::unique_ptr<PinnedHostBuffer>(new PinnedHostBuffer(static_cast<uint8_t*>(p), bytes));
}

PinnedHostBuffer::~PinnedHostBuffer() { cudaFreeHost(ptr_); }

absl::StatusOr<std::unique_ptr<OwnedCudaStream>> OwnedCudaStream::Create() {
  cudaStream_t s;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return FromCuda(e, "cudaStreamCreateWithFlags");
  return std::unique_ptr<OwnedCudaStream>(new OwnedCudaStream(s));
}

OwnedCudaStream::~OwnedCudaStream() { cudaStreamDestroy(static_cast<cudaStream_t>(handle_)); }

absl::StatusOr<std::unique_ptr<CudaEventTimer>> CudaEventTimer::Create() {
  cudaEvent_t a, b;
  cudaError_t e = cudaEventCreate(&a);
  if (e != cudaSuccess) return FromCuda(e, "cudaEventCreate");
  e = cudaEventCreate(&b);
  if (e != cudaSuccess) {
    cudaEventDestroy(a);
    return FromCuda(e, "cudaEventCreate");
  }
  return std::unique_ptr<CudaEventTimer>(new CudaEventTimer(a, b));
}

CudaEventTimer::~CudaEventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

absl::Status CudaEventTimer::Start(CudaStream s) {
  return FromCuda(cudaEventRecord(static_cast<cudaEvent_t>(start_), S(s)), "cudaEventRecord");
}
absl::Status CudaEventTimer::Stop(CudaStream s) {
  return FromCuda(cudaEventRecord(static_cast<cudaEvent_t>(stop_), S(s)), "cudaEventRecord");
}
absl::StatusOr<float> CudaEventTimer::ElapsedMs() {
  cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(stop_));
  if (e != cudaSuccess) return FromCuda(e, "cudaEventSynchronize");
  float ms = 0;
  e = cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_));
  if (e != cudaSuccess) return FromCuda(e, "cudaEventElapsedTime");
  return ms;
}

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, CudaStream s) {
  return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S(s)), "cudaMemcpyAsync(H2D)");
}
absl::Status CopyToHost(void* dst, const void* src, size_t bytes, CudaStream s) {
  return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S(s)), "cudaMemcpyAsync(D2H)");
}
absl::Status CopyToHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                          CudaStream s) {
  if (width == 0 || rows == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToHost, S(s)),
                  "cudaMemcpy2DAsync(D2H)");
}
absl::Status CopyToDevice2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                            CudaStream s) {
  if (width == 0 || rows == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyHostToDevice, S(s)),
                  "cudaMemcpy2DAsync(H2D)");
}
absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, CudaStream s) {
  return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S(s)), "cudaMemcpyAsync(D2D)");
}
absl::Status CopyDeviceToDevice2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                  size_t rows, CudaStream s) {
  if (width == 0 || rows == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, S(s)),
                  "cudaMemcpy2DAsync(D2D)");
}
absl::Status FillDevice(void* dst, int byte, size_t bytes, CudaStream s) {
  return FromCuda(cudaMemsetAsync(dst, byte, bytes, S(s)), "cudaMemsetAsync");
}
absl::Status Synchronize(CudaStream s) { return FromCuda(cudaStreamSynchronize(S(s)), "cudaStreamSynchronize"); }

absl::StatusOr<bool> StreamIdle(CudaStream s) {
  const cudaError_t e = cudaStreamQuery(S(s));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  absl::Status status = FromCuda(e, "cudaStreamQuery");
  if (!status.ok()) return status;
  return true;
}

absl::StatusOr<int> MultiprocessorCount() {
  int device = 0;
  if (absl::Status s = FromCuda(cudaGetDevice(&device), "cudaGetDevice"); !s.ok()) return s;
  int count = 0;
  if (absl::Status s = FromCuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
                                "cudaDeviceGetAttribute");
      !s.ok()) {
    return s;
  }
  return count;
}

}  // namespace kvt
