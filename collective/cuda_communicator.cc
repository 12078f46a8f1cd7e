#include "collective/cuda_communicator.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "common/cuda_util.h"
#include "common/status_macros.h"
#include "collective/all_reduce.h"
#include "collective/call_tag.h"
#include "collective/cuda_all_reduce_kernels.h"
#include "collective/cuda_peer_group.h"
#include "collective/nccl_library.h"

namespace kvt::collective {
namespace {

using internal::DeviceStatus;
using internal::StepFormat;

constexpr size_t kFlagAreaBytes = 4096;  // FlagWords(16) * 8 = 1024, padded so the step areas stay aligned
static_assert(internal::FlagWords(16) * 8 <= kFlagAreaBytes, "the flags of the largest world fit their area");

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

uint64_t TagOfCall(uint64_t call, size_t count, DataType type, const AllReduceOptions& o, bool one_shot) {
  return CallTag(0x6b76745f61727475ull,
                 {call, static_cast<uint64_t>(count), static_cast<uint64_t>(type), static_cast<uint64_t>(one_shot),
                  static_cast<uint64_t>(o.step1_bits), static_cast<uint64_t>(o.step2_bits),
                  static_cast<uint64_t>(o.group_size), static_cast<uint64_t>(o.spike_reserve),
                  static_cast<uint64_t>(o.chunk_bytes)});
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaCommunicator>> CudaCommunicator::Create(
    std::unique_ptr<CollectiveWire> bootstrap, const CudaCommunicatorOptions& options) {
  if (options.workspace_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("workspace_bytes must be at least 4096, got %d", options.workspace_bytes));
  }
  std::unique_ptr<CudaCommunicator> comm(new CudaCommunicator());
  KVT_ASSIGN_OR_RETURN(comm->group_, internal::CudaPeerGroup::Create(std::move(bootstrap),
                                                                     {.device = options.device,
                                                                      .flag_bytes = kFlagAreaBytes,
                                                                      .area_bytes = options.workspace_bytes,
                                                                      .bootstrap_timeout = options.bootstrap_timeout,
                                                                      .what = "CudaCommunicator"}));
  // Every rank checks the same values from here on (the group checked workspace_bytes alike on every rank), so
  // what one refuses, all refuse.
  KVT_RETURN_IF_ERROR(comm->AgreeOnOneShot(options));
  // Each half of the one-shot region: one encoding per rank of up to one_shot_bytes of input (an encoding is never
  // larger than its raw input but for group headers), plus room for the 16-byte alignment of every shard slot.
  const uint64_t world = static_cast<uint64_t>(comm->group_->world_size());
  // Each half a multiple of 256 bytes, so both start aligned (the region's start is rounded down to 256 too).
  const uint64_t one_shot_half =
      options.one_shot_bytes == 0
          ? 0
          : (world * (static_cast<uint64_t>(options.one_shot_bytes) + (uint64_t{64} << 10)) + 255) / 256 * 256;
  if (options.one_shot_bytes > options.workspace_bytes || 2 * one_shot_half > options.workspace_bytes / 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "one_shot_bytes %d needs a one-shot region of %d bytes in a world of %d, more than half of workspace_bytes "
        "%d: lower one_shot_bytes or raise workspace_bytes",
        options.one_shot_bytes, 2 * one_shot_half, world, options.workspace_bytes));
  }
  // The round counter starts at zero, before any kernel of this communicator can run.
  KVT_RETURN_IF_ERROR(comm->group_->UseDevice());
  KVT_ASSIGN_OR_RETURN(comm->round_state_, DeviceBuffer::Create(sizeof(internal::RoundState)));
  const CudaStream own{comm->group_->StreamOr(nullptr)};
  KVT_RETURN_IF_ERROR(FillDevice(comm->round_state_->get(), 0, sizeof(internal::RoundState), own));
  KVT_RETURN_IF_ERROR(::kvt::Synchronize(own));
  comm->routing_ = options.nccl_routing;
  comm->early_launch_ = options.early_launch;
  comm->one_shot_bytes_ = options.one_shot_bytes;
  comm->one_shot_half_ = one_shot_half;
  KVT_RETURN_IF_ERROR(comm->SetUpNccl(options));
  return comm;
}

absl::Status CudaCommunicator::AgreeOnOneShot(const CudaCommunicatorOptions& options) {
  // Ranks that chose paths differently would not meet (a one-shot round signals once, a two-step round waits
  // for two signals): every rank tells every other its one_shot_bytes, and all refuse a difference.
  CollectiveWire& wire = group_->wire();
  const int world = group_->world_size();
  const int me = group_->rank();
  const absl::Time deadline = absl::Now() + options.bootstrap_timeout;
  const uint64_t mine = options.one_shot_bytes;
  std::vector<uint64_t> theirs(world, mine);
  for (int r = 0; r < world; ++r) {
    if (r != me) {
      KVT_RETURN_IF_ERROR(wire.Send(r, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&mine), 8), deadline));
    }
  }
  for (int r = 0; r < world; ++r) {
    if (r != me) {
      KVT_RETURN_IF_ERROR(wire.Receive(r, absl::MakeSpan(reinterpret_cast<uint8_t*>(&theirs[r]), 8), deadline));
    }
  }
  for (int r = 0; r < world; ++r) {
    if (theirs[r] != mine) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "ranks disagree on one_shot_bytes: rank %d has %d, rank %d %d (set it alike on every rank)", me, mine, r,
          theirs[r]));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::SetUpNccl(const CudaCommunicatorOptions& options) {
  // 0: not asked, 1: loaded, 2: asked but could not load. Every rank tells every other, so all decide alike
  // before any enters ncclCommInitRank (which would wait forever for a rank that never comes).
  enum : uint8_t { kNotAsked = 0, kLoaded = 1, kFailed = 2 };
  uint8_t mine = kNotAsked;
  absl::Status load_error;
  if (!options.nccl_library.empty()) {
    absl::StatusOr<std::unique_ptr<NcclLibrary>> lib = NcclLibrary::Load(options.nccl_library);
    if (lib.ok()) {
      nccl_library_ = *std::move(lib);
      mine = kLoaded;
    } else {
      load_error = lib.status();
      mine = kFailed;
    }
  }
  CollectiveWire& wire = group_->wire();
  const int world = group_->world_size();
  const int me = group_->rank();
  const absl::Time deadline = absl::Now() + options.bootstrap_timeout;
  std::vector<uint8_t> states(world, kNotAsked);
  states[me] = mine;
  for (int r = 0; r < world; ++r) {
    if (r != me) KVT_RETURN_IF_ERROR(wire.Send(r, absl::MakeConstSpan(&mine, 1), deadline));
  }
  for (int r = 0; r < world; ++r) {
    if (r != me) KVT_RETURN_IF_ERROR(wire.Receive(r, absl::MakeSpan(&states[r], 1), deadline));
  }
  for (int r = 0; r < world; ++r) {
    if (states[r] == kFailed) {
      return absl::FailedPreconditionError(
          r == me ? absl::StrFormat("rank %d cannot use NCCL: %s", me, load_error.message())
                  : absl::StrFormat("rank %d could not load its nccl_library (see that rank's error)", r));
    }
  }
  for (int r = 0; r < world; ++r) {
    if ((states[r] == kNotAsked) != (mine == kNotAsked)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "ranks disagree on using NCCL: rank %d %s nccl_library, rank %d %s (set it alike on every rank)", me,
          mine == kNotAsked ? "has no" : "sets", r, states[r] == kNotAsked ? "does not" : "does"));
    }
  }
  if (mine == kNotAsked) return absl::OkStatus();
  KVT_RETURN_IF_ERROR(group_->UseDevice());
  KVT_ASSIGN_OR_RETURN(nccl_comm_, nccl_library_->InitOverWire(wire, deadline));
  return absl::OkStatus();
}

CudaCommunicator::~CudaCommunicator() = default;

std::string CudaCommunicator::nccl_version() const {
  return nccl_library_ == nullptr ? std::string() : nccl_library_->Version();
}

AllReducePath CudaCommunicator::PathOf(size_t count, DataType type, const AllReduceOptions& options) const {
  return ChooseAllReducePath(routing_, nccl_loaded(), count, type, options);
}

absl::Status CudaCommunicator::NcclAllReduce(const void* in, void* out, size_t count, DataType type, void* stream) {
  NcclType nccl_type = NcclType::kFloat32;
  if (type == DataType::kBfloat16) nccl_type = NcclType::kBfloat16;
  if (type == DataType::kFloat16) nccl_type = NcclType::kFloat16;
  void* const s = group_->StreamOr(stream);
  KVT_RETURN_IF_ERROR(nccl_comm_->AllReduce(in, out, count, nccl_type, s));
  if (!routing_.check_finite) return absl::OkStatus();
  return internal::LaunchFindNonFinite(out, count, type, group_->sm_count(),
                                       group_->status(), s);
}

int CudaCommunicator::rank() const { return group_->rank(); }
int CudaCommunicator::world_size() const { return group_->world_size(); }
int CudaCommunicator::device() const { return group_->device(); }

void* CudaCommunicator::stream() const { return group_->StreamOr(nullptr); }

absl::Status CudaCommunicator::AllReduceAsync(const void* in, void* out, size_t count, DataType type,
                                              const AllReduceOptions& options, void* stream) {
  KVT_RETURN_IF_ERROR(ValidateCudaOptions(options));
  if (count == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("AllReduce buffers must not be null");
  if (count >= (uint64_t{1} << 34)) {  // the kernels count a round's groups in 32 bits
    return absl::InvalidArgumentError(absl::StrFormat("AllReduce handles fewer than 2^34 values, got %d", count));
  }
  KVT_RETURN_IF_ERROR(group_->UseDevice());
  timeout_ = options.timeout;
  group_->set_drain(options.timeout + absl::Seconds(10));
  if (PathOf(count, type, options) == AllReducePath::kNccl) return NcclAllReduce(in, out, count, type, stream);
  const int world = group_->world_size();
  // The one-shot region sits at the end of every area, apart from the step areas (cuda_all_reduce_kernels.h),
  // starting on a 256-byte boundary.
  const size_t workspace_bytes = (group_->area_bytes() - 2 * one_shot_half_) / 256 * 256;
  const StepFormat step1 = MakeFormat(options.step1_bits, options);
  const StepFormat step2 = MakeFormat(options.step2_bits, options);
  const size_t element_bytes = numerics::DTypeBytes(type);
  const uint64_t chunk_values = options.chunk_bytes / sizeof(float);
  const uint64_t total_chunks = (count + chunk_values - 1) / chunk_values;
  const internal::ChunkClass full =
      internal::MakeChunkClass(std::min<uint64_t>(chunk_values, count), world, step1, step2, type);

  internal::RoundParams p;
  p.type = type;
  p.world = world;
  p.rank = group_->rank();
  p.chunk_values = chunk_values;
  p.step1 = step1;
  p.step2 = step2;
  p.full = full;
  p.timeout_ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(options.timeout));
  p.status = group_->status();
  p.sms = group_->sm_count();
  p.state = static_cast<internal::RoundState*>(round_state_->get());
  void* const s = group_->StreamOr(stream);
  // Small calls: one round, one kernel, when its encodings fit in a half of the one-shot region.
  if (count * element_bytes <= one_shot_bytes_ && internal::OneShotHalfBytes(full, world, total_chunks) <= one_shot_half_) {
    p.call_tag = TagOfCall(calls_++, count, type, options, /*one_shot=*/true);
    p.chunks = total_chunks;
    p.call_offset = 0;
    p.last = internal::MakeChunkClass(count - (total_chunks - 1) * chunk_values, world, step1, step2, type);
    p.one_shot_half = one_shot_half_;
    for (int r = 0; r < world; ++r) {
      p.flags[r] = group_->flags(r);
      p.one_shot_area[r] = group_->area(r) + workspace_bytes;
    }
    return internal::LaunchOneShotAllReduce(in, out, p, s);
  }
  // Whole chunks per round, so that every rank's areas fit in workspace_bytes (the biggest step-1 area is a
  // rank with a shard of base + 1 values).
  uint64_t per_chunk = 0;
  for (int j = 0; j < world; ++j) {
    per_chunk = std::max(per_chunk, internal::Step1AreaBytes(full, world, j, 1) + internal::Step2AreaBytes(full, world, 1));
  }
  const uint64_t chunks_per_round = workspace_bytes / per_chunk;
  if (chunks_per_round == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "one chunk's encodings need %d bytes of workspace but workspace_bytes is %d: lower chunk_bytes or raise "
        "workspace_bytes",
        per_chunk, workspace_bytes));
  }

  p.call_tag = TagOfCall(calls_++, count, type, options, /*one_shot=*/false);
  for (uint64_t first_chunk = 0; first_chunk < total_chunks; first_chunk += chunks_per_round) {
    p.chunks = std::min(chunks_per_round, total_chunks - first_chunk);
    p.call_offset = first_chunk * chunk_values;
    const uint64_t round_values = std::min<uint64_t>(count - p.call_offset, p.chunks * chunk_values);
    p.last = internal::MakeChunkClass(round_values - (p.chunks - 1) * chunk_values, world, step1, step2, type);
    for (int r = 0; r < world; ++r) {
      uint8_t* const area = group_->area(r);
      p.flags[r] = group_->flags(r);
      p.step1_area[r] = area;
      p.step2_area[r] = area + internal::Step1AreaBytes(full, world, r, p.chunks);
    }
    const uint64_t offset_bytes = p.call_offset * element_bytes;
    KVT_RETURN_IF_ERROR(internal::LaunchAllReduceRound(static_cast<const uint8_t*>(in) + offset_bytes,
                                                       static_cast<uint8_t*>(out) + offset_bytes, p,
                                                       early_launch_, s));
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::Synchronize(void* stream, absl::Time deadline) {
  absl::StatusOr<DeviceStatus> got = group_->Finish(stream, deadline);
  absl::Status result =
      got.ok() ? internal::DeviceStatusToStatus(*got, group_->rank(), "AllReduce", timeout_) : got.status();
  // NCCL kernels may be waiting for a peer that is gone: destroy the NCCL communicator by aborting it.
  if (!result.ok() && nccl_comm_ != nullptr) nccl_comm_->AbortOnDestroy();
  return result;
}

absl::Status CudaCommunicator::AllReduce(absl::Span<const float> in, absl::Span<float> out,
                                         const AllReduceOptions& options) {
  KVT_RETURN_IF_ERROR(ValidateCudaOptions(options));
  if (in.size() != out.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AllReduce input has %d values, output %d", in.size(), out.size()));
  }
  if (in.empty()) return absl::OkStatus();
  KVT_RETURN_IF_ERROR(group_->UseDevice());
  const size_t bytes = in.size() * sizeof(float);
  if (staging_ == nullptr || staging_->size() < bytes) {
    staging_.reset();
    KVT_ASSIGN_OR_RETURN(staging_, DeviceBuffer::Create(bytes));
  }
  const CudaStream s{group_->StreamOr(nullptr)};
  KVT_RETURN_IF_ERROR(::kvt::CopyToDevice(staging_->get(), in.data(), bytes, s));
  KVT_RETURN_IF_ERROR(
      AllReduceAsync(staging_->get(), staging_->get(), in.size(), DataType::kFloat32, options, s.handle));
  KVT_RETURN_IF_ERROR(::kvt::CopyToHost(out.data(), staging_->get(), bytes, s));
  return Synchronize(s.handle, absl::Now() + options.timeout + absl::Seconds(10));
}

}  // namespace kvt::collective
