// CUDA IPC (cuda_ipc.h): the only place in common/ that sees cudaError_t.
#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda_ipc.h"

namespace kvt {
namespace {

absl::Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clear the sticky last error so later calls do not report this one
  const std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorNotSupported:
      return absl::FailedPreconditionError(
          absl::StrCat(msg, "; GPU regions need a CUDA device in this process (register shared memory instead)"));
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace

absl::Status UseCudaDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return absl::OkStatus();  // the per-call case
  cudaGetLastError();
  int count = 0;
  absl::Status s = FromCuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!s.ok()) return s;
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", device, " does not exist here (", count,
                                                      " device(s))"));
  }
  return FromCuda(cudaSetDevice(device), "cudaSetDevice");
}

absl::StatusOr<std::string> ExportCudaIpcHandle(void* device_ptr, int device) {
  absl::Status s = UseCudaDevice(device);
  if (!s.ok()) return s;
  cudaIpcMemHandle_t handle;
  s = FromCuda(cudaIpcGetMemHandle(&handle, device_ptr), "cudaIpcGetMemHandle");
  if (!s.ok()) return s;
  static_assert(sizeof(handle) == kCudaIpcHandleBytes, "cudaIpcMemHandle_t changed size");
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

absl::StatusOr<std::unique_ptr<IpcMapping>> IpcMapping::Open(const std::string& handle_bytes, uint64_t size_bytes,
                                                             int device) {
  if (handle_bytes.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC handle is ", kCudaIpcHandleBytes, " bytes, got ",
                                                   handle_bytes.size()));
  }
  if (size_bytes == 0) return absl::InvalidArgumentError("size_bytes must be positive");
  absl::Status s = UseCudaDevice(device);
  if (!s.ok()) return s;
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, handle_bytes.data(), sizeof(handle));
  void* ptr = nullptr;
  s = FromCuda(cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  if (!s.ok()) return s;
  return std::unique_ptr<IpcMapping>(new IpcMapping(ptr, size_bytes, device));
}

IpcMapping::~IpcMapping() {
  if (cudaSetDevice(device_) == cudaSuccess) cudaIpcCloseMemHandle(data_);
}

}  // namespace kvt
