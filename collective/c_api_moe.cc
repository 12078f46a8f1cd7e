// The C ABI's MoE Dispatch/Combine (c_api.h) over ExpertAllToAll (host backends) and CudaExpertAllToAll.
#include <array>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "collective/c_api.h"
#include "collective/c_api_support.h"
#include "collective/cuda_expert_all_to_all.h"
#include "collective/data_type.h"
#include "collective/moe.h"

static_assert(sizeof(size_t) == sizeof(uint64_t), "slot and rank offsets cross the ABI as uint64_t");

struct kvt_coll_moe {
  kvt_coll_moe_shape shape{};
  std::unique_ptr<kvt::collective::ExpertAllToAll> host;      // TCP and UCX
  std::unique_ptr<kvt::collective::CudaExpertAllToAll> cuda;  // CUDA
  // The host exchange's last two results (it keeps two), for Combine to find the one a kvt_coll_moe_result names.
  std::array<const kvt::collective::DispatchResult*, 2> recent{};
  std::array<int32_t, 2> recent_tokens{};
};

namespace {

using ::kvt::collective::CudaDispatchResult;
using ::kvt::collective::DataType;
using ::kvt::collective::DispatchQuant;
using ::kvt::collective::DispatchResult;
using ::kvt::collective::c_api::Done;
using ::kvt::collective::c_api::Fail;
using ::kvt::collective::c_api::MsOr;
using ::kvt::collective::c_api::StreamOrDefault;

absl::Status CheckShape(const kvt_coll_moe_shape& s, int backend) {
  if (s.hidden <= 0 || s.topk <= 0 || s.num_experts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("shape.hidden, topk and num_experts must be positive, got ",
                                                   s.hidden, ", ", s.topk, ", ", s.num_experts));
  }
  if (s.quant != KVT_COLL_MOE_NONE && s.quant != KVT_COLL_MOE_FP8 && s.quant != KVT_COLL_MOE_INT) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape.quant must be KVT_COLL_MOE_NONE (0), KVT_COLL_MOE_FP8 (1) or KVT_COLL_MOE_INT (2), got ", s.quant));
  }
  if (backend == KVT_COLL_CUDA && s.quant == KVT_COLL_MOE_INT) {
    return absl::InvalidArgumentError("the CUDA backend dispatches FP8 or unquantized tokens, not KVT_COLL_MOE_INT");
  }
  if (backend == KVT_COLL_CUDA && s.dtype != KVT_COLL_F32 && s.dtype != KVT_COLL_BF16 && s.dtype != KVT_COLL_F16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape.dtype must be KVT_COLL_F32 (0), KVT_COLL_BF16 (1) or KVT_COLL_F16 (2), got ", s.dtype));
  }
  if (s.bits < 0 || s.group_size < 0 || s.max_tokens < 0) {
    return absl::InvalidArgumentError("shape.bits, group_size and max_tokens must not be negative (0: the default)");
  }
  return absl::OkStatus();
}

DispatchQuant QuantOf(int32_t q) {
  return q == KVT_COLL_MOE_FP8 ? DispatchQuant::kFp8 : (q == KVT_COLL_MOE_INT ? DispatchQuant::kInt : DispatchQuant::kNone);
}

absl::Status Create(const kvt_coll_config& c, const kvt_coll_moe_shape& shape,
                    std::unique_ptr<kvt_coll_listener> listener, std::unique_ptr<kvt_coll_moe>& out) {
  if (absl::Status s = kvt::collective::c_api::CheckConfig(c); !s.ok()) return s;
  if (absl::Status s = CheckShape(shape, c.backend); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<kvt::collective::TcpWire>> wire =
      kvt::collective::c_api::BootstrapWire(c, std::move(listener));
  if (!wire.ok()) return wire.status();
  auto moe = std::make_unique<kvt_coll_moe>();
  moe->shape = shape;
  if (moe->shape.bits == 0) moe->shape.bits = 8;
  if (moe->shape.group_size == 0) moe->shape.group_size = 128;
  if (moe->shape.max_tokens == 0) moe->shape.max_tokens = 128;
  if (c.backend != KVT_COLL_CUDA) {
    absl::StatusOr<std::unique_ptr<kvt::collective::CollectiveWire>> host_wire =
        kvt::collective::c_api::HostWire(c, *std::move(wire));
    if (!host_wire.ok()) return host_wire.status();
    absl::StatusOr<std::unique_ptr<kvt::collective::ExpertAllToAll>> host =
        kvt::collective::ExpertAllToAll::Create(*std::move(host_wire));
    if (!host.ok()) return host.status();
    moe->host = *std::move(host);
  } else {
    kvt::collective::CudaExpertAllToAllOptions o;
    o.device = c.device;
    o.hidden = shape.hidden;
    o.topk = shape.topk;
    o.num_experts = shape.num_experts;
    o.max_tokens = moe->shape.max_tokens;
    o.type = static_cast<DataType>(shape.dtype);
    o.quant = QuantOf(shape.quant);
    o.group_size = moe->shape.group_size;
    o.bootstrap_timeout = MsOr(c.bootstrap_timeout_ms, absl::Seconds(30));
    absl::StatusOr<std::unique_ptr<kvt::collective::CudaExpertAllToAll>> cuda =
        kvt::collective::CudaExpertAllToAll::Create(*std::move(wire), o);
    if (!cuda.ok()) return cuda.status();
    moe->cuda = *std::move(cuda);
  }
  out = std::move(moe);
  return absl::OkStatus();
}

void FromHost(const DispatchResult& d, int32_t num_tokens, kvt_coll_moe_result& r) {
  r = {};
  r.sequence = d.sequence;
  r.num_rows = static_cast<int64_t>(d.num_rows());
  r.num_slots = static_cast<int64_t>(d.num_slots());
  r.rows = d.tokens.data();
  r.source_rank = d.source_rank.data();
  r.source_index = d.source_index.data();
  r.slot_offsets = reinterpret_cast<const uint64_t*>(d.slot_offsets.data());
  r.slot_expert = d.slot_expert.data();
  r.slot_weight = d.slot_weight.data();
  r.rank_offsets = reinterpret_cast<const uint64_t*>(d.rank_offsets.data());
  r.num_tokens = num_tokens;
}

void FromCuda(const CudaDispatchResult& d, int world, int topk, int32_t num_tokens, kvt_coll_moe_result& r) {
  r = {};
  r.sequence = d.sequence;
  r.max_tokens = d.max_tokens;
  r.num_rows = static_cast<int64_t>(world) * d.max_tokens;
  r.num_slots = r.num_rows * topk;
  r.rows = d.rows;
  r.source_index = d.source_index;
  r.slot_expert = d.slot_expert;
  r.slot_weight = d.slot_weight;
  r.counts = d.counts;
  r.num_tokens = num_tokens;
}

absl::Status Dispatch(kvt_coll_moe& m, const void* tokens, const int32_t* experts, const float* weights,
                      int32_t num_tokens, uint32_t timeout_ms, void* stream, kvt_coll_moe_result& out) {
  if (num_tokens < 0) return absl::InvalidArgumentError(absl::StrCat("num_tokens is negative: ", num_tokens));
  const absl::Duration timeout = MsOr(timeout_ms, absl::Seconds(30));
  const kvt_coll_moe_shape& s = m.shape;
  if (m.cuda != nullptr) {
    absl::StatusOr<CudaDispatchResult> d = m.cuda->DispatchAsync(tokens, experts, weights, num_tokens,
                                                                 {.timeout = timeout}, StreamOrDefault(stream));
    if (!d.ok()) return d.status();
    FromCuda(*d, m.cuda->world_size(), s.topk, num_tokens, out);
    return absl::OkStatus();
  }
  if (num_tokens > 0 && (tokens == nullptr || experts == nullptr || weights == nullptr)) {
    return absl::InvalidArgumentError("kvt_coll_moe_dispatch: tokens, topk_experts and topk_weights must not be NULL");
  }
  const size_t n = static_cast<size_t>(num_tokens);
  kvt::collective::DispatchInput input{
      .tokens = absl::MakeConstSpan(static_cast<const float*>(tokens), n * s.hidden),
      .topk_experts = absl::MakeConstSpan(experts, n * s.topk),
      .topk_weights = absl::MakeConstSpan(weights, n * s.topk),
      .hidden = s.hidden,
      .topk = s.topk,
      .num_experts = s.num_experts};
  kvt::collective::DispatchOptions o{.quant = QuantOf(s.quant),
                                     .bits = s.bits,
                                     .group_size = s.group_size,
                                     .spike_reserve = s.spike_reserve != 0,
                                     .timeout = timeout};
  absl::StatusOr<const DispatchResult*> d = m.host->Dispatch(input, o);
  if (!d.ok()) return d.status();
  m.recent[(*d)->sequence % 2] = *d;
  m.recent_tokens[(*d)->sequence % 2] = num_tokens;
  FromHost(**d, num_tokens, out);
  return absl::OkStatus();
}

absl::Status Combine(kvt_coll_moe& m, const kvt_coll_moe_result& r, const void* expert_out, void* out,
                     uint32_t timeout_ms, void* stream) {
  const absl::Duration timeout = MsOr(timeout_ms, absl::Seconds(30));
  if (m.cuda != nullptr) {
    CudaDispatchResult d;
    d.sequence = r.sequence;
    d.max_tokens = r.max_tokens;
    d.rows = r.rows;
    d.source_index = r.source_index;
    d.slot_expert = r.slot_expert;
    d.slot_weight = r.slot_weight;
    d.counts = r.counts;
    return m.cuda->CombineAsync(d, expert_out, out, {.timeout = timeout}, StreamOrDefault(stream));
  }
  const DispatchResult* d = m.recent[r.sequence % 2];
  if (d == nullptr || d->sequence != r.sequence || d->tokens.data() != r.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kvt_coll_moe_combine: dispatch ", r.sequence, " is not one of this exchange's last two dispatches"));
  }
  const size_t hidden = static_cast<size_t>(m.shape.hidden);
  if ((d->num_slots() > 0 && expert_out == nullptr) || (m.recent_tokens[r.sequence % 2] > 0 && out == nullptr)) {
    return absl::InvalidArgumentError("kvt_coll_moe_combine: expert_out and out must not be NULL");
  }
  return m.host->Combine(
      *d, absl::MakeConstSpan(static_cast<const float*>(expert_out), d->num_slots() * hidden),
      absl::MakeSpan(static_cast<float*>(out), static_cast<size_t>(m.recent_tokens[r.sequence % 2]) * hidden),
      {.timeout = timeout});
}

}  // namespace

extern "C" {

int kvt_coll_moe_create(const kvt_coll_config* config, const kvt_coll_moe_shape* shape, kvt_coll_moe** out) {
  // As kvt_coll_create: the listener is consumed once the config's version is readable.
  const bool readable = config != nullptr && config->abi_version == KVT_COLL_ABI_VERSION;
  std::unique_ptr<kvt_coll_listener> listener(readable ? config->listener : nullptr);
  if (config == nullptr || shape == nullptr || out == nullptr) {
    return Fail(absl::InvalidArgumentError("kvt_coll_moe_create: config, shape and out must not be NULL"));
  }
  *out = nullptr;
  std::unique_ptr<kvt_coll_moe> moe;
  const absl::Status status = Create(*config, *shape, std::move(listener), moe);
  if (status.ok()) *out = moe.release();
  return Done(status);
}

void kvt_coll_moe_destroy(kvt_coll_moe* moe) { delete moe; }

int kvt_coll_moe_dispatch(kvt_coll_moe* moe, const void* tokens, const int32_t* topk_experts,
                          const float* topk_weights, int32_t num_tokens, uint32_t timeout_ms, void* stream,
                          kvt_coll_moe_result* out) {
  if (moe == nullptr || out == nullptr) {
    return Fail(absl::InvalidArgumentError("kvt_coll_moe_dispatch: moe and out must not be NULL"));
  }
  return Done(Dispatch(*moe, tokens, topk_experts, topk_weights, num_tokens, timeout_ms, stream, *out));
}

int kvt_coll_moe_combine(kvt_coll_moe* moe, const kvt_coll_moe_result* dispatched, const void* expert_out,
                         void* out, uint32_t timeout_ms, void* stream) {
  if (moe == nullptr || dispatched == nullptr) {
    return Fail(absl::InvalidArgumentError("kvt_coll_moe_combine: moe and dispatched must not be NULL"));
  }
  return Done(Combine(*moe, *dispatched, expert_out, out, timeout_ms, stream));
}

int kvt_coll_moe_synchronize(kvt_coll_moe* moe, void* stream, uint32_t timeout_ms) {
  if (moe == nullptr) return Fail(absl::InvalidArgumentError("kvt_coll_moe_synchronize: moe is NULL"));
  if (moe->cuda == nullptr) return Done(absl::OkStatus());
  return Done(moe->cuda->Synchronize(StreamOrDefault(stream), absl::Now() + MsOr(timeout_ms, absl::Seconds(30))));
}

}  // extern "C"
