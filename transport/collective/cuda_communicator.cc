#include "transport/collective/cuda_communicator.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "codec/gpu/cuda_util.h"
#include "common/status_macros.h"
#include "transport/collective/all_reduce.h"
#include "transport/collective/call_tag.h"
#include "transport/collective/cuda_all_reduce_kernels.h"

namespace kvt::collective {
namespace {

using codec::gpu::CudaStream;
using internal::DeviceStatus;
using internal::ElementType;
using internal::StepFormat;

constexpr uint32_t kHelloMagic = 0x6b765463;  // "kvTc"
constexpr size_t kFlagAreaBytes = 4096;       // FlagWords(16) * 8 = 512, padded so the step areas stay aligned

// What each rank tells every other at Create.
struct Hello {
  uint32_t magic;
  int32_t world;
  int32_t rank;
  int32_t device;
  uint64_t workspace_bytes;
  char handle[kCudaIpcHandleBytes];
};

ElementType ToElementType(DataType type) {
  switch (type) {
    case DataType::kBfloat16:
      return ElementType::kBfloat16;
    case DataType::kFloat16:
      return ElementType::kFloat16;
    case DataType::kFloat32:
      break;
  }
  return ElementType::kFloat32;
}

StepFormat MakeFormat(int bits, const AllReduceOptions& options) {
  StepFormat f;
  f.bits = bits;
  f.group_size = options.group_size;
  f.spike = bits != 0 && options.spike_reserve;
  f.header_bytes = bits == 0 ? 0 : (f.spike ? 16 : 8);
  return f;
}

absl::Status ValidateCudaOptions(const AllReduceOptions& options) {
  KVT_RETURN_IF_ERROR(ValidateAllReduceOptions(options));
  const int g = options.group_size;
  if (g < 16 || g > 256 || (g & (g - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the CUDA AllReduce needs group_size to be a power of two from 16 to 256 (one group per team of "
        "group_size/16 threads), got %d",
        g));
  }
  return absl::OkStatus();
}

uint64_t TagOfCall(uint64_t call, size_t count, DataType type, const AllReduceOptions& o) {
  return CallTag(0x6b76745f61727475ull,
                 {call, static_cast<uint64_t>(count), static_cast<uint64_t>(type),
                  static_cast<uint64_t>(o.step1_bits), static_cast<uint64_t>(o.step2_bits),
                  static_cast<uint64_t>(o.group_size), static_cast<uint64_t>(o.spike_reserve),
                  static_cast<uint64_t>(o.chunk_bytes)});
}

DeviceStatus CleanStatus() {
  DeviceStatus s{};
  s.first_bad_input = ~0ull;
  s.first_bad_sum = ~0ull;
  s.peer = internal::kMaxCudaWorld;
  s.reporter = internal::kMaxCudaWorld;
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaCommunicator>> CudaCommunicator::Create(
    std::unique_ptr<CollectiveWire> bootstrap, const CudaCommunicatorOptions& options) {
  if (bootstrap == nullptr) return absl::InvalidArgumentError("CudaCommunicator needs a bootstrap wire");
  if (bootstrap->world_size() > internal::kMaxCudaWorld) {
    return absl::InvalidArgumentError(absl::StrFormat("the CUDA backend handles at most %d ranks, got %d",
                                                      internal::kMaxCudaWorld, bootstrap->world_size()));
  }
  if (options.workspace_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("workspace_bytes must be at least 4096, got %d", options.workspace_bytes));
  }
  std::unique_ptr<CudaCommunicator> comm(new CudaCommunicator());
  comm->rank_ = bootstrap->rank();
  comm->world_ = bootstrap->world_size();
  comm->bootstrap_ = std::move(bootstrap);
  KVT_RETURN_IF_ERROR(comm->Bootstrap(options));
  return comm;
}

absl::Status CudaCommunicator::Bootstrap(const CudaCommunicatorOptions& options) {
  KVT_ASSIGN_OR_RETURN(const int devices, codec::gpu::CudaDeviceCount());
  if (devices == 0) return absl::FailedPreconditionError("CudaCommunicator needs a CUDA device; none is present");
  device_ = options.device >= 0 ? options.device : rank_ % devices;
  KVT_RETURN_IF_ERROR(UseCudaDevice(device_));
  KVT_ASSIGN_OR_RETURN(sm_count_, codec::gpu::MultiprocessorCount());
  workspace_bytes_ = options.workspace_bytes;
  KVT_ASSIGN_OR_RETURN(own_stream_, codec::gpu::OwnedCudaStream::Create());
  KVT_ASSIGN_OR_RETURN(workspace_, codec::gpu::DeviceBuffer::Create(kFlagAreaBytes + workspace_bytes_));
  KVT_RETURN_IF_ERROR(codec::gpu::FillDevice(workspace_->get(), 0, kFlagAreaBytes));
  KVT_ASSIGN_OR_RETURN(status_, codec::gpu::DeviceBuffer::Create(sizeof(DeviceStatus)));
  const DeviceStatus clean = CleanStatus();
  KVT_RETURN_IF_ERROR(codec::gpu::CopyToDevice(status_->get(), &clean, sizeof(clean)));
  KVT_RETURN_IF_ERROR(codec::gpu::Synchronize());  // flags are zero before any peer can map them

  KVT_ASSIGN_OR_RETURN(const std::string handle, ExportCudaIpcHandle(workspace_->get(), device_));
  Hello mine{};
  mine.magic = kHelloMagic;
  mine.world = world_;
  mine.rank = rank_;
  mine.device = device_;
  mine.workspace_bytes = workspace_bytes_;
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
      return absl::FailedPreconditionError(
          absl::StrFormat("rank %d sent a malformed CudaCommunicator hello (world %d, rank %d)", r, theirs.world,
                          theirs.rank));
    }
    if (theirs.workspace_bytes != workspace_bytes_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rank %d has workspace_bytes %d and rank %d has %d: every rank must pass the same", r,
          theirs.workspace_bytes, rank_, workspace_bytes_));
    }
    absl::StatusOr<std::unique_ptr<IpcMapping>> mapped = IpcMapping::Open(
        std::string(theirs.handle, kCudaIpcHandleBytes), kFlagAreaBytes + workspace_bytes_, device_);
    if (!mapped.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "cannot map rank %d's workspace (GPU %d) into rank %d (GPU %d): %s. The CUDA backend needs every rank on "
          "one host with peer access; use WireCommunicator over UcxWire across hosts",
          r, theirs.device, rank_, device_, mapped.status().message()));
    }
    peers_[r] = *std::move(mapped);
    bases_[r] = static_cast<uint8_t*>(peers_[r]->data());
  }
  return absl::OkStatus();
}

CudaCommunicator::~CudaCommunicator() {
  if (workspace_ == nullptr) return;
  (void)UseCudaDevice(device_);
  // Bounded: a stream stuck on a dead peer ends at its kernels' own timeout.
  (void)Synchronize(nullptr, absl::Now() + timeout_ + absl::Seconds(10));
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

void* CudaCommunicator::stream() const { return own_stream_->get().handle; }

absl::Status CudaCommunicator::AllReduceAsync(const void* in, void* out, size_t count, DataType type,
                                              const AllReduceOptions& options, void* stream) {
  KVT_RETURN_IF_ERROR(ValidateCudaOptions(options));
  if (count == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("AllReduce buffers must not be null");
  if (count >= (uint64_t{1} << 34)) {  // the kernels count a round's groups in 32 bits
    return absl::InvalidArgumentError(absl::StrFormat("AllReduce handles fewer than 2^34 values, got %d", count));
  }
  KVT_RETURN_IF_ERROR(UseCudaDevice(device_));
  timeout_ = options.timeout;
  const StepFormat step1 = MakeFormat(options.step1_bits, options);
  const StepFormat step2 = MakeFormat(options.step2_bits, options);
  const ElementType element = ToElementType(type);
  const size_t element_bytes = internal::ElementBytes(element);
  const uint64_t chunk_values = options.chunk_bytes / sizeof(float);
  const uint64_t total_chunks = (count + chunk_values - 1) / chunk_values;
  const internal::ChunkClass full =
      internal::MakeChunkClass(std::min<uint64_t>(chunk_values, count), world_, step1, step2, element);

  // Whole chunks per round, so that every rank's areas fit in workspace_bytes (the biggest step-1 area is a
  // rank with a shard of base + 1 values).
  uint64_t per_chunk = 0;
  for (int j = 0; j < world_; ++j) {
    per_chunk = std::max(per_chunk, internal::Step1AreaBytes(full, world_, j, 1) + internal::Step2AreaBytes(full, world_, 1));
  }
  const uint64_t chunks_per_round = workspace_bytes_ / per_chunk;
  if (chunks_per_round == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "one chunk's encodings need %d bytes of workspace but workspace_bytes is %d: lower chunk_bytes or raise "
        "workspace_bytes",
        per_chunk, workspace_bytes_));
  }

  internal::RoundParams p;
  p.type = element;
  p.world = world_;
  p.rank = rank_;
  p.chunk_values = chunk_values;
  p.step1 = step1;
  p.step2 = step2;
  p.full = full;
  p.timeout_ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(options.timeout));
  p.status = static_cast<DeviceStatus*>(status_->get());
  p.sms = sm_count_;
  p.call_tag = TagOfCall(calls_++, count, type, options);
  void* const s = stream != nullptr ? stream : own_stream_->get().handle;
  for (uint64_t first_chunk = 0; first_chunk < total_chunks; first_chunk += chunks_per_round) {
    p.chunks = std::min(chunks_per_round, total_chunks - first_chunk);
    p.call_offset = first_chunk * chunk_values;
    const uint64_t round_values = std::min<uint64_t>(count - p.call_offset, p.chunks * chunk_values);
    p.last = internal::MakeChunkClass(round_values - (p.chunks - 1) * chunk_values, world_, step1, step2, element);
    for (int r = 0; r < world_; ++r) {
      uint8_t* const area = bases_[r] + kFlagAreaBytes;
      p.flags[r] = reinterpret_cast<uint64_t*>(bases_[r]);
      p.step1_area[r] = area;
      p.step2_area[r] = area + internal::Step1AreaBytes(full, world_, r, p.chunks);
    }
    p.epoch = ++epoch_;
    const uint64_t offset_bytes = p.call_offset * element_bytes;
    KVT_RETURN_IF_ERROR(internal::LaunchAllReduceRound(static_cast<const uint8_t*>(in) + offset_bytes,
                                                       static_cast<uint8_t*>(out) + offset_bytes, p, s));
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::Synchronize(void* stream, absl::Time deadline) {
  KVT_RETURN_IF_ERROR(UseCudaDevice(device_));
  const CudaStream s{stream != nullptr ? stream : own_stream_->get().handle};
  absl::Duration nap = absl::Microseconds(20);
  while (true) {
    KVT_ASSIGN_OR_RETURN(const bool idle, codec::gpu::StreamIdle(s));
    if (idle) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          "the GPU did not finish the collective by the deadline (a kernel still waits on a peer; the group is out "
          "of step)");
    }
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(2));
  }
  DeviceStatus got{};
  KVT_RETURN_IF_ERROR(codec::gpu::CopyToHost(&got, status_->get(), sizeof(got)));
  if (got.errors == 0) return absl::OkStatus();
  const DeviceStatus clean = CleanStatus();
  KVT_RETURN_IF_ERROR(codec::gpu::CopyToDevice(status_->get(), &clean, sizeof(clean)));
  const int peer = got.peer;
  if (got.errors & internal::kBadInput) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot quantize the non-finite input value at index %d on rank %d", got.first_bad_input, rank_));
  }
  if (got.errors & internal::kBadSum) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the reduced sum at index %d is not finite (it overflowed fp32) before the step-2 quantization",
        got.first_bad_sum));
  }
  if (got.errors & internal::kMismatch) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d is at a different AllReduce call than rank %d (do all ranks pass the same count, type and "
        "options, in the same order?)",
        peer, rank_));
  }
  const int reporter = got.reporter;
  if (got.errors & internal::kPeerBadData) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d reported a non-finite input or reduced sum, or a disagreeing call; see that rank's error",
        reporter));
  }
  if (got.errors & internal::kTimedOut) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "rank %d did not signal within %s (is it alive and running the same collectives?)", peer,
        absl::FormatDuration(timeout_)));
  }
  return absl::DeadlineExceededError(
      absl::StrFormat("rank %d timed out waiting for another rank; see that rank's error", reporter));
}

absl::Status CudaCommunicator::AllReduce(absl::Span<const float> in, absl::Span<float> out,
                                         const AllReduceOptions& options) {
  KVT_RETURN_IF_ERROR(ValidateCudaOptions(options));
  if (in.size() != out.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AllReduce input has %d values, output %d", in.size(), out.size()));
  }
  if (in.empty()) return absl::OkStatus();
  KVT_RETURN_IF_ERROR(UseCudaDevice(device_));
  const size_t bytes = in.size() * sizeof(float);
  if (staging_ == nullptr || staging_->size() < bytes) {
    staging_.reset();
    KVT_ASSIGN_OR_RETURN(staging_, codec::gpu::DeviceBuffer::Create(bytes));
  }
  const CudaStream s = own_stream_->get();
  KVT_RETURN_IF_ERROR(codec::gpu::CopyToDevice(staging_->get(), in.data(), bytes, s));
  KVT_RETURN_IF_ERROR(
      AllReduceAsync(staging_->get(), staging_->get(), in.size(), DataType::kFloat32, options, s.handle));
  KVT_RETURN_IF_ERROR(codec::gpu::CopyToHost(out.data(), staging_->get(), bytes, s));
  return Synchronize(s.handle, absl::Now() + options.timeout + absl::Seconds(10));
}

}  // namespace kvt::collective
