#include "collective/cuda_expert_all_to_all.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/cuda_util.h"
#include "common/status_macros.h"
#include "collective/call_tag.h"
#include "collective/cuda_moe_kernels.h"
#include "collective/cuda_peer_group.h"

namespace kvt::collective {
namespace {

using internal::DispatchState;
using internal::MoeLayout;

constexpr uint64_t kTagSeed = 0x6b7467706d6f65ull;  // "ktgpmoe"
constexpr int kMaxTopk = 32;
constexpr int kMaxTokens = 8192;

absl::Status ValidateOptions(const CudaExpertAllToAllOptions& o, int world) {
  if (o.hidden < 16 || o.hidden % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaExpertAllToAll hidden must be a positive multiple of 16, got %d", o.hidden));
  }
  if (o.topk < 1 || o.topk > kMaxTopk) {
    return absl::InvalidArgumentError(absl::StrFormat("CudaExpertAllToAll topk must be 1..%d, got %d", kMaxTopk, o.topk));
  }
  if (o.num_experts < world || o.num_experts % world != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaExpertAllToAll num_experts %d is not a positive multiple of the world size %d", o.num_experts, world));
  }
  if (o.max_tokens < 1 || o.max_tokens > kMaxTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaExpertAllToAll max_tokens must be 1..%d, got %d", kMaxTokens, o.max_tokens));
  }
  if (o.quant != DispatchQuant::kFp8 && o.quant != DispatchQuant::kNone) {
    return absl::InvalidArgumentError(
        "CudaExpertAllToAll sends tokens as FP8 or raw; integer dispatch (kInt) is the CPU backend's only");
  }
  const int g = o.group_size;
  if (o.quant == DispatchQuant::kFp8 && (g < 16 || g > 512 || (g & (g - 1)) != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaExpertAllToAll group_size must be a power of two from 16 to 512 (16 values per thread), got %d", g));
  }
  return absl::OkStatus();
}

MoeLayout MakeLayout(const CudaExpertAllToAllOptions& o, int world, int rank) {
  MoeLayout l;
  l.world = world;
  l.rank = rank;
  l.hidden = o.hidden;
  l.topk = o.topk;
  l.experts_per_rank = o.num_experts / world;
  l.max_tokens = o.max_tokens;
  l.type = o.type;
  l.fp8 = o.quant == DispatchQuant::kFp8;
  l.group_size = l.fp8 ? o.group_size : 16;
  internal::FinishMoeLayout(l);
  return l;
}

// The shape every rank must agree on, in every call's tag.
uint64_t ShapeTag(const CudaExpertAllToAllOptions& o) {
  return CallTag(kTagSeed, {static_cast<uint64_t>(o.hidden), static_cast<uint64_t>(o.topk),
                            static_cast<uint64_t>(o.num_experts), static_cast<uint64_t>(o.max_tokens),
                            static_cast<uint64_t>(o.type), static_cast<uint64_t>(o.quant),
                            static_cast<uint64_t>(o.group_size)});
}

size_t Align256(size_t b) { return (b + 255) / 256 * 256; }

// Lays DispatchState's arrays out from `base` (null: only counts) and returns the bytes they take.
size_t PlaceState(const MoeLayout& l, uint8_t* base, DispatchState* d) {
  const size_t rows = static_cast<size_t>(l.world) * l.max_tokens;
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    uint8_t* here = base == nullptr ? nullptr : base + at;
    at += Align256(bytes);
    return here;
  };
  d->positions = reinterpret_cast<int32_t*>(take(static_cast<size_t>(l.max_tokens) * l.world * sizeof(int32_t)));
  d->sent_counts = reinterpret_cast<int32_t*>(take(internal::kMaxCudaWorld * sizeof(int32_t)));
  d->rows = take(rows * l.hidden * numerics::DTypeBytes(l.type));
  d->source_index = reinterpret_cast<int32_t*>(take(rows * sizeof(int32_t)));
  d->slot_expert = reinterpret_cast<int32_t*>(take(rows * l.topk * sizeof(int32_t)));
  d->slot_weight = reinterpret_cast<float*>(take(rows * l.topk * sizeof(float)));
  d->counts = reinterpret_cast<int32_t*>(take(internal::kMaxCudaWorld * sizeof(int32_t)));
  return at;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaExpertAllToAll>> CudaExpertAllToAll::Create(
    std::unique_ptr<CollectiveWire> bootstrap, const CudaExpertAllToAllOptions& options) {
  if (bootstrap == nullptr) return absl::InvalidArgumentError("CudaExpertAllToAll needs a bootstrap wire");
  KVT_RETURN_IF_ERROR(ValidateOptions(options, bootstrap->world_size()));
  std::unique_ptr<CudaExpertAllToAll> a2a(new CudaExpertAllToAll());
  a2a->options_ = options;
  a2a->layout_ = MakeLayout(options, bootstrap->world_size(), bootstrap->rank());
  KVT_ASSIGN_OR_RETURN(a2a->group_, internal::CudaPeerGroup::Create(
                                        std::move(bootstrap), {.device = options.device,
                                                               .flag_bytes = Align256(internal::kMoeFlagBytes),
                                                               .area_bytes = internal::MoeAreaBytes(a2a->layout_),
                                                               .bootstrap_timeout = options.bootstrap_timeout,
                                                               .what = "CudaExpertAllToAll"}));
  KVT_RETURN_IF_ERROR(internal::LoadMoeKernels());
  KVT_RETURN_IF_ERROR(a2a->Allocate());
  return a2a;
}

CudaExpertAllToAll::~CudaExpertAllToAll() = default;

int CudaExpertAllToAll::rank() const { return group_->rank(); }
int CudaExpertAllToAll::world_size() const { return group_->world_size(); }
void* CudaExpertAllToAll::stream() const { return group_->StreamOr(nullptr); }

absl::Status CudaExpertAllToAll::Allocate() {
  KVT_ASSIGN_OR_RETURN(epochs_, DeviceBuffer::Create(internal::kMoeEpochs * sizeof(internal::MoeEpoch)));
  KVT_RETURN_IF_ERROR(::kvt::FillDevice(epochs_->get(), 0, internal::kMoeEpochs * sizeof(internal::MoeEpoch)));
  DispatchState sizing;
  const size_t bytes = PlaceState(layout_, nullptr, &sizing);
  for (Set& set : sets_) {
    KVT_ASSIGN_OR_RETURN(set.memory, DeviceBuffer::Create(bytes));
    KVT_RETURN_IF_ERROR(::kvt::FillDevice(set.memory->get(), 0, bytes));
    PlaceState(layout_, static_cast<uint8_t*>(set.memory->get()), &set.state);
    set.result.max_tokens = options_.max_tokens;
    set.result.rows = set.state.rows;
    set.result.source_index = set.state.source_index;
    set.result.slot_expert = set.state.slot_expert;
    set.result.slot_weight = set.state.slot_weight;
    set.result.counts = set.state.counts;
  }
  return ::kvt::Synchronize();
}

internal::MoeCall CudaExpertAllToAll::MakeCall(bool dispatch, uint64_t number, uint64_t call_tag,
                                               absl::Duration timeout) const {
  const int parity = static_cast<int>(number % 2);
  internal::MoeCall call;
  call.layout = layout_;
  const uint64_t slots = dispatch ? internal::DispatchSlotsOffset(layout_, parity)
                                  : internal::CombineSlotsOffset(layout_, parity);
  for (int r = 0; r < world_size(); ++r) {
    call.slots[r] = group_->area(r) + slots;
    call.flags[r] = group_->flags(r);
  }
  call.signal_word = dispatch ? internal::DispatchSignalWord(parity) : internal::CombineSignalWord(parity);
  call.tag_word = dispatch ? internal::DispatchTagWord(parity) : internal::CombineTagWord(parity);
  call.count_word = dispatch ? internal::DispatchCountWord(parity) : 0;
  call.epoch = static_cast<internal::MoeEpoch*>(epochs_->get()) + (dispatch ? 0 : 2) + parity;
  call.call_tag = call_tag;
  call.timeout_ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(timeout));
  call.status = group_->status();
  call.sms = group_->sm_count();
  return call;
}

absl::StatusOr<CudaDispatchResult> CudaExpertAllToAll::DispatchAsync(const void* tokens, const int32_t* topk_experts,
                                                                     const float* topk_weights, int num_tokens,
                                                                     const CudaMoeCallOptions& options, void* stream) {
  if (num_tokens < 0 || num_tokens > options_.max_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Dispatch got %d tokens; this exchange was created for 0..%d (max_tokens)", num_tokens, options_.max_tokens));
  }
  if (num_tokens > 0 && (tokens == nullptr || topk_experts == nullptr || topk_weights == nullptr)) {
    return absl::InvalidArgumentError("Dispatch buffers must not be null");
  }
  if (reinterpret_cast<uintptr_t>(tokens) % 16 != 0) {
    return absl::InvalidArgumentError("Dispatch tokens must be 16-byte aligned (the kernels load 16 bytes at a time)");
  }
  if (options.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("Dispatch timeout must be positive");
  KVT_RETURN_IF_ERROR(group_->UseDevice());
  timeout_ = options.timeout;
  group_->set_drain(options.timeout + absl::Seconds(10));
  const uint64_t sequence = dispatches_++;
  Set& set = sets_[sequence % 2];
  set.valid = false;
  set.num_tokens = num_tokens;
  set.result.sequence = sequence;
  const internal::MoeCall call =
      MakeCall(true, sequence, CallTag(kTagSeed, {1, sequence, ShapeTag(options_)}), options.timeout);
  KVT_RETURN_IF_ERROR(internal::LaunchDispatch(tokens, topk_experts, topk_weights, num_tokens, set.state, call,
                                               options.early_launch, group_->StreamOr(stream)));
  set.valid = true;
  return set.result;
}

absl::Status CudaExpertAllToAll::CheckResult(const CudaDispatchResult& d) const {
  const Set& set = sets_[d.sequence % 2];
  if (!set.valid || set.result.sequence != d.sequence || set.result.rows != d.rows ||
      d.sequence + 2 < dispatches_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Dispatch result %d is not one of this exchange's two latest (%d Dispatches so far)", d.sequence,
        dispatches_));
  }
  return absl::OkStatus();
}

absl::Status CudaExpertAllToAll::CombineAsync(const CudaDispatchResult& dispatched, const void* expert_out, void* out,
                                              const CudaMoeCallOptions& options, void* stream) {
  KVT_RETURN_IF_ERROR(CheckResult(dispatched));
  const Set& set = sets_[dispatched.sequence % 2];
  if (expert_out == nullptr || (out == nullptr && set.num_tokens > 0)) {
    return absl::InvalidArgumentError("Combine buffers must not be null");
  }
  if (options.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("Combine timeout must be positive");
  KVT_RETURN_IF_ERROR(group_->UseDevice());
  timeout_ = options.timeout;
  group_->set_drain(options.timeout + absl::Seconds(10));
  const uint64_t number = combines_++;
  const internal::MoeCall call = MakeCall(
      false, number, CallTag(kTagSeed, {2, number, dispatched.sequence, ShapeTag(options_)}), options.timeout);
  return internal::LaunchCombine(expert_out, out, set.num_tokens, set.state, call, options.early_launch,
                                 group_->StreamOr(stream));
}

absl::Status CudaExpertAllToAll::Synchronize(void* stream, absl::Time deadline) {
  KVT_ASSIGN_OR_RETURN(const internal::DeviceStatus got, group_->Finish(stream, deadline));
  return internal::DeviceStatusToStatus(got, rank(), "Dispatch/Combine", timeout_);
}

absl::StatusOr<DispatchResult> CudaExpertAllToAll::ReadDispatch(const CudaDispatchResult& d) {
  KVT_RETURN_IF_ERROR(CheckResult(d));
  KVT_RETURN_IF_ERROR(group_->UseDevice());
  const int world = world_size();
  const int topk = options_.topk;
  const size_t hidden = options_.hidden;
  const size_t element = numerics::DTypeBytes(options_.type);
  // Copies on this exchange's stream, after the calls that wrote the result.
  const CudaStream s{stream()};
  std::vector<int32_t> counts(world);
  KVT_RETURN_IF_ERROR(::kvt::CopyToHost(counts.data(), d.counts, world * sizeof(int32_t), s));
  KVT_RETURN_IF_ERROR(::kvt::Synchronize(s));
  DispatchResult out;
  out.sequence = d.sequence;
  out.hidden = options_.hidden;
  out.experts_per_rank = experts_per_rank();
  out.rank_offsets.assign(1, 0);
  out.slot_offsets.assign(1, 0);
  for (int src = 0; src < world; ++src) {
    const int n = counts[src];
    if (n < 0 || n > options_.max_tokens) {
      return absl::DataLossError(absl::StrFormat("rank %d's row count is %d", src, n));
    }
    const size_t first = static_cast<size_t>(src) * options_.max_tokens;
    std::vector<uint8_t> rows(n * hidden * element);
    std::vector<int32_t> index(n), experts(static_cast<size_t>(n) * topk);
    std::vector<float> weights(static_cast<size_t>(n) * topk);
    if (n > 0) {
      const uint8_t* rows_at = static_cast<const uint8_t*>(d.rows) + first * hidden * element;
      KVT_RETURN_IF_ERROR(::kvt::CopyToHost(rows.data(), rows_at, rows.size(), s));
      KVT_RETURN_IF_ERROR(::kvt::CopyToHost(index.data(), d.source_index + first, n * sizeof(int32_t), s));
      KVT_RETURN_IF_ERROR(::kvt::CopyToHost(experts.data(), d.slot_expert + first * topk, experts.size() * 4, s));
      KVT_RETURN_IF_ERROR(::kvt::CopyToHost(weights.data(), d.slot_weight + first * topk, weights.size() * 4, s));
      KVT_RETURN_IF_ERROR(::kvt::Synchronize(s));
    }
    for (int i = 0; i < n; ++i) {
      out.source_rank.push_back(src);
      out.source_index.push_back(index[i]);
      for (int k = 0; k < topk; ++k) {
        if (experts[static_cast<size_t>(i) * topk + k] < 0) continue;
        out.slot_expert.push_back(experts[static_cast<size_t>(i) * topk + k]);
        out.slot_weight.push_back(weights[static_cast<size_t>(i) * topk + k]);
      }
      out.slot_offsets.push_back(out.slot_expert.size());
    }
    const std::vector<float> values = DecodeAs(options_.type, rows);
    out.tokens.insert(out.tokens.end(), values.begin(), values.end());
    out.rank_offsets.push_back(out.source_index.size());
  }
  return out;
}

}  // namespace kvt::collective
