#include "collective/cuda_peer_group.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/cuda_util.h"
#include "common/status_macros.h"

namespace kvt::collective::internal {
namespace {


constexpr uint32_t kHelloMagic = 0x6b765463;  // "kvTc"

// What each rank tells every other at Create.
struct Hello {
  uint32_t magic;
  int32_t world;
  int32_t rank;
  int32_t device;
  uint64_t flag_bytes;
  uint64_t area_bytes;
  char handle[kCudaIpcHandleBytes];
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaPeerGroup>> CudaPeerGroup::Create(std::unique_ptr<CollectiveWire> bootstrap,
                                                                     const CudaPeerGroupOptions& options) {
  if (bootstrap == nullptr) return absl::InvalidArgumentError(options.what + " needs a bootstrap wire");
  if (bootstrap->world_size() > kMaxCudaWorld) {
    return absl::InvalidArgumentError(absl::StrFormat("the CUDA backend handles at most %d ranks, got %d",
                                                      kMaxCudaWorld, bootstrap->world_size()));
  }
  if (options.flag_bytes == 0 || options.flag_bytes % 256 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("flag_bytes must be a positive multiple of 256, got %d", options.flag_bytes));
  }
  std::unique_ptr<CudaPeerGroup> group(new CudaPeerGroup());
  group->rank_ = bootstrap->rank();
  group->world_ = bootstrap->world_size();
  group->what_ = options.what;
  group->bootstrap_ = std::move(bootstrap);
  KVT_RETURN_IF_ERROR(group->Bootstrap(options));
  return group;
}

absl::Status CudaPeerGroup::Bootstrap(const CudaPeerGroupOptions& options) {
  KVT_ASSIGN_OR_RETURN(const int devices, ::kvt::CudaDeviceCount());
  if (devices == 0) return absl::FailedPreconditionError(what_ + " needs a CUDA device; none is present");
  device_ = options.device >= 0 ? options.device : rank_ % devices;
  KVT_RETURN_IF_ERROR(UseCudaDevice(device_));
  KVT_ASSIGN_OR_RETURN(sm_count_, ::kvt::MultiprocessorCount());
  flag_bytes_ = options.flag_bytes;
  area_bytes_ = options.area_bytes;
  KVT_ASSIGN_OR_RETURN(own_stream_, OwnedCudaStream::Create());
  KVT_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::Create(flag_bytes_ + area_bytes_));
  KVT_RETURN_IF_ERROR(::kvt::FillDevice(workspace_->get(), 0, flag_bytes_));
  KVT_ASSIGN_OR_RETURN(status_, DeviceBuffer::Create(sizeof(DeviceStatus)));
  const DeviceStatus clean = CleanDeviceStatus();
  KVT_RETURN_IF_ERROR(::kvt::CopyToDevice(status_->get(), &clean, sizeof(clean)));
  KVT_RETURN_IF_ERROR(::kvt::Synchronize());  // flags are zero before any peer can map them

  KVT_ASSIGN_OR_RETURN(const std::string handle, ExportCudaIpcHandle(workspace_->get(), device_));
  Hello mine{};
  mine.magic = kHelloMagic;
  mine.world = world_;
  mine.rank = rank_;
  mine.device = device_;
  mine.flag_bytes = flag_bytes_;
  mine.area_bytes = area_bytes_;
  std::memcpy(mine.handle, handle.data(), kCudaIpcHandleBytes);
  const absl::Time deadline = absl::Now() + options.bootstrap_timeout;
  const auto bytes = [](Hello& h) { return absl::MakeSpan(reinterpret_cast<uint8_t*>(&h), sizeof(h)); };
  for (int r = 0; r < world_; ++r) {
    if (r != rank_) KVT_RETURN_IF_ERROR(bootstrap_->Send(r, bytes(mine), deadline));
  }
  peers_.resize(world_);
  bases_.assign(world_, nullptr);
  bases_[rank_] = static_cast<uint8_t*>(workspace_->get());
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    Hello theirs{};
    KVT_RETURN_IF_ERROR(bootstrap_->Receive(r, bytes(theirs), deadline));
    if (theirs.magic != kHelloMagic || theirs.world != world_ || theirs.rank != r) {
      return absl::FailedPreconditionError(absl::StrFormat("rank %d sent a malformed %s hello (world %d, rank %d)",
                                                           r, what_, theirs.world, theirs.rank));
    }
    if (theirs.flag_bytes != flag_bytes_ || theirs.area_bytes != area_bytes_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rank %d's %s workspace is %d + %d bytes and rank %d's is %d + %d: every rank must pass the same "
          "sizes",
          r, what_, theirs.flag_bytes, theirs.area_bytes, rank_, flag_bytes_, area_bytes_));
    }
    absl::StatusOr<std::unique_ptr<IpcMapping>> mapped =
        IpcMapping::Open(std::string(theirs.handle, kCudaIpcHandleBytes), flag_bytes_ + area_bytes_, device_);
    if (!mapped.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "cannot map rank %d's workspace (GPU %d) into rank %d (GPU %d): %s. The CUDA backend needs every rank on "
          "one host with peer access; use the CPU backend over UcxWire across hosts",
          r, theirs.device, rank_, device_, mapped.status().message()));
    }
    peers_[r] = *std::move(mapped);
    bases_[r] = static_cast<uint8_t*>(peers_[r]->data());
  }
  return absl::OkStatus();
}

CudaPeerGroup::~CudaPeerGroup() {
  if (workspace_ == nullptr) return;
  (void)UseCudaDevice(device_);
  // Bounded: a stream stuck on a dead peer ends at its kernels' own timeout.
  (void)Finish(nullptr, absl::Now() + drain_);
  if (!peers_.empty() && world_ > 1) {
    // Goodbye: once every peer said it is done, none can still store into this workspace.
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    uint8_t bye = 1;
    for (int r = 0; r < world_; ++r) {
      if (r != rank_) (void)bootstrap_->Send(r, absl::MakeSpan(&bye, 1), deadline);
    }
    for (int r = 0; r < world_; ++r) {
      if (r != rank_) (void)bootstrap_->Receive(r, absl::MakeSpan(&bye, 1), deadline);
    }
  }
  peers_.clear();
}

DeviceStatus* CudaPeerGroup::status() const { return static_cast<DeviceStatus*>(status_->get()); }

void* CudaPeerGroup::StreamOr(void* stream) const {
  return stream != nullptr ? stream : own_stream_->get().handle;
}

absl::Status CudaPeerGroup::UseDevice() const { return UseCudaDevice(device_); }

absl::StatusOr<DeviceStatus> CudaPeerGroup::Finish(void* stream, absl::Time deadline) {
  KVT_RETURN_IF_ERROR(UseCudaDevice(device_));
  const CudaStream s{StreamOr(stream)};
  absl::Duration nap = absl::Microseconds(20);
  while (true) {
    KVT_ASSIGN_OR_RETURN(const bool idle, ::kvt::StreamIdle(s));
    if (idle) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "the GPU did not finish the %s call by the deadline (a kernel still waits on a peer; the group is out "
          "of step)",
          what_));
    }
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(2));
  }
  DeviceStatus got{};
  KVT_RETURN_IF_ERROR(::kvt::CopyToHost(&got, status_->get(), sizeof(got)));
  if (got.errors != 0) {
    const DeviceStatus clean = CleanDeviceStatus();
    KVT_RETURN_IF_ERROR(::kvt::CopyToDevice(status_->get(), &clean, sizeof(clean)));
  }
  return got;
}

absl::Status DeviceStatusToStatus(const DeviceStatus& got, int rank, const std::string& call,
                                  absl::Duration timeout) {
  if (got.errors == 0) return absl::OkStatus();
  const int peer = got.peer;
  if (got.errors & kBadInput) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s cannot quantize the non-finite input value at index %d on rank %d", call, got.first_bad_input, rank));
  }
  if (got.errors & kBadRouting) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s top-k slot %d (token * topk + k) on rank %d has an expert id outside [-1, num_experts) or a "
        "non-finite weight",
        call, got.first_bad_route, rank));
  }
  if (got.errors & kBadSum) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the reduced sum at index %d is not finite (a NaN or Inf in some rank's input, or the sum overflowed)",
        got.first_bad_sum));
  }
  if (got.errors & kMismatch) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d is at a different %s call than rank %d (do all ranks make the same calls with the same sizes, "
        "type and options, in the same order?)",
        peer, call, rank));
  }
  if (got.errors & kPeerBadData) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d reported bad input (a non-finite value or sum, bad routing) or a disagreeing call in %s; see "
        "that rank's error",
        got.reporter, call));
  }
  if (got.errors & kTimedOut) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "rank %d did not signal %s within %s (is it alive and running the same collectives?)", peer, call,
        absl::FormatDuration(timeout)));
  }
  return absl::DeadlineExceededError(absl::StrFormat(
      "rank %d timed out waiting for another rank in %s; see that rank's error", got.reporter, call));
}

}  // namespace kvt::collective::internal
