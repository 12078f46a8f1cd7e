// CUDA IPC (cuda_ipc.h): the only place in common/ that sees cudaError_t.
#include <cuda.h>  // types of the driver entry point looked up below (no link to libcuda)
#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <optional>

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
  // A new Status rather than an assignment: nvcc's front end warns (#2810-D) on assigning a [[nodiscard]] type.
  if (absl::Status got = FromCuda(cudaIpcGetMemHandle(&handle, device_ptr), "cudaIpcGetMemHandle"); !got.ok()) {
    return got;
  }
  static_assert(sizeof(handle) == kCudaIpcHandleBytes, "cudaIpcMemHandle_t changed size");
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

// The size of the allocation that starts at `base`, through the driver's cuMemGetAddressRange (looked up through
// the runtime, so that nothing links libcuda itself); nullopt where the driver does not offer it.
std::optional<uint64_t> AllocationBytes(void* base) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return std::nullopt;
  }
  CUdeviceptr start = 0;
  size_t bytes = 0;
  if (reinterpret_cast<GetAddressRange>(fn)(&start, &bytes, reinterpret_cast<CUdeviceptr>(base)) != CUDA_SUCCESS) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(reinterpret_cast<CUdeviceptr>(base) - start + bytes);
}

absl::StatusOr<std::unique_ptr<IpcMapping>> IpcMapping::Open(const std::string& handle_bytes, uint64_t size_bytes,
                                                             int device, uint64_t offset_bytes) {
  if (handle_bytes.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC handle is ", kCudaIpcHandleBytes, " bytes, got ",
                                                   handle_bytes.size()));
  }
  if (size_bytes == 0) return absl::InvalidArgumentError("size_bytes must be positive");
  if (offset_bytes % kCudaIpcOffsetAlignment != 0) {
    // The kernels read and write the region's blocks with 16-byte vectors; a misaligned region would fault, and a
    // fault poisons the daemon's CUDA context for every GPU region.
    return absl::InvalidArgumentError(absl::StrCat("offset_bytes ", offset_bytes, " is not a multiple of ",
                                                   kCudaIpcOffsetAlignment,
                                                   " (register the KV cache tensor itself, not a view into it)"));
  }
  if (offset_bytes > std::numeric_limits<uint64_t>::max() - size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("offset_bytes ", offset_bytes, " + size_bytes ", size_bytes,
                                                   " overflows"));
  }
  absl::Status s = UseCudaDevice(device);
  if (!s.ok()) return s;
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, handle_bytes.data(), sizeof(handle));
  void* ptr = nullptr;
  if (absl::Status opened =
          FromCuda(cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
      !opened.ok()) {
    return opened;
  }
  auto mapping = std::unique_ptr<IpcMapping>(new IpcMapping(ptr, offset_bytes, size_bytes, device));
  if (const std::optional<uint64_t> allocation = AllocationBytes(ptr);
      allocation.has_value() && offset_bytes + size_bytes > *allocation) {
    return absl::InvalidArgumentError(absl::StrCat("the region [", offset_bytes, ", +", size_bytes,
                                                   ") does not fit in the ", *allocation,
                                                   "-byte allocation its CUDA IPC handle names"));
  }
  return mapping;
}

IpcMapping::~IpcMapping() {
  if (cudaSetDevice(device_) == cudaSuccess) cudaIpcCloseMemHandle(base_);
}

}  // namespace kvt
