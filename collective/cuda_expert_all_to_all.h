// The CUDA peer-memory backend of MoE Dispatch/Combine (docs/COLLECTIVES.md): the GPUs of one host, one process
// per GPU, exchange tokens with their kernels storing straight into each other's receive buffers through CUDA IPC
// (cuda_moe_kernels.h), with no copy through the host and no host synchronisation inside a call.
//
// The semantics are ExpertAllToAll's (moe.h): experts split evenly over the ranks; each token goes once to every
// rank that holds one of its top-k experts, FP8 E4M3 with per-group scales (Fp8GroupQuantize's bytes) or raw;
// Combine returns, per token, the sum over ranks (in rank order, fp32) of each rank's weighted sum of its slots
// (in top-k order, fp32). Differences, for a GPU pipeline with no host round trip:
//   - The shape (hidden, topk, num_experts, element type, quantization) and a capacity of max_tokens tokens per
//     rank and call are fixed at Create, so every buffer is allocated once.
//   - The receive buffer is rank-major with a fixed stride: the rows from rank r are r * max_tokens + i for
//     i < counts[r] (a device array), in increasing source index. Experts can run without the host ever reading
//     the counts (ReadDispatch copies everything to the host when it is wanted).
//   - Expert outputs come per top-k slot, [world * max_tokens][topk][hidden] (slot k of row r at r * topk + k;
//     slots whose expert is elsewhere are not read), and each rank's partial sum travels back in the element type
//     (bf16 halves Combine's bytes; for fp32 the result is bitwise ExpertAllToAll's).
//
//   KVT_ASSIGN_OR_RETURN(auto tcp, TcpWire::Create({.rank = rank, .peers = peers}));
//   KVT_ASSIGN_OR_RETURN(auto a2a, CudaExpertAllToAll::Create(std::move(tcp), {.hidden = 7168, .topk = 8,
//                                                                             .num_experts = 256}));
//   KVT_ASSIGN_OR_RETURN(CudaDispatchResult d, a2a->DispatchAsync(d_tokens, d_experts, d_weights, n));
//   ... experts read d.rows, d.slot_expert, d.slot_weight, d.counts on the same stream and write d_expert_out ...
//   KVT_RETURN_IF_ERROR(a2a->CombineAsync(d, d_expert_out, d_out));
//   KVT_RETURN_IF_ERROR(a2a->Synchronize(nullptr, absl::Now() + absl::Seconds(30)));
//
// Double buffering: Dispatches use two buffer sets in turn, and so do Combines, so back-to-back calls need no
// synchronisation; a CudaDispatchResult stays valid until the second Dispatch after it. The calls' epochs live
// on the GPU (internal::MoeEpoch), so calls captured in a CUDA graph signal with new ones on every replay. Contract: every rank makes
// the same calls in the same order (the number of tokens may differ), ordered on the GPU (one stream, or the
// caller orders them). A disagreeing rank is detected by a per-call tag (FAILED_PRECONDITION); every wait on the
// GPU gives up after the call's timeout (DEADLINE_EXCEEDED), so a dead peer cannot hang a stream.
//
// Threading: one thread at a time calls a CudaExpertAllToAll.
#ifndef KVT_COLLECTIVE_CUDA_EXPERT_ALL_TO_ALL_H_
#define KVT_COLLECTIVE_CUDA_EXPERT_ALL_TO_ALL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective_wire.h"
#include "collective/cuda_moe_kernels.h"
#include "collective/data_type.h"
#include "collective/moe.h"

namespace kvt {
class DeviceBuffer;
}  // namespace kvt

namespace kvt::collective {

namespace internal {
class CudaPeerGroup;
}  // namespace internal

struct CudaExpertAllToAllOptions {
  // This rank's CUDA device; -1 picks rank % device count.
  int device = -1;
  // Token width, a positive multiple of 16.
  int hidden = 0;
  // Slots per token, 1..32.
  int topk = 0;
  // A positive multiple of the world size.
  int num_experts = 0;
  // Tokens one rank may pass to one Dispatch, 1..8192. Default 128.
  int max_tokens = 128;
  // Element type of the tokens, the received rows, the expert outputs and Combine's output.
  DataType type = DataType::kBfloat16;
  // kFp8 or kNone (kInt is the CPU backend's only).
  DispatchQuant quant = DispatchQuant::kFp8;
  // FP8 group: a power of two from 16 to 512. Default 128.
  int group_size = 128;
  // Deadline of the handle exchange at Create and of the goodbye at destruction.
  absl::Duration bootstrap_timeout = absl::Seconds(30);
};

struct CudaMoeCallOptions {
  // How long the GPU waits for the peers' signals. Default 30 s.
  absl::Duration timeout = absl::Seconds(30);
  // Launch the receive kernel early, as a programmatic dependent of the send kernel (Hopper): its blocks start
  // as the send kernel's finish and wait on the signals. false: a plain launch after the send kernel drains.
  // The same bytes either way.
  bool early_launch = true;
};

// One Dispatch's result in device memory, valid until the second Dispatch after it.
struct CudaDispatchResult {
  uint64_t sequence = 0;
  int max_tokens = 0;  // rows from rank r are r * max_tokens + i, i < counts[r]
  // [world * max_tokens][hidden] elements: the received tokens, dequantized.
  const void* rows = nullptr;
  // [world * max_tokens]: each row's index at its source rank.
  const int32_t* source_index = nullptr;
  // [world * max_tokens][topk]: each row's slots as this rank sees them: the local expert id (global id minus
  // rank * experts_per_rank) and the weight, or -1 and 0 for a slot whose expert is on another rank.
  const int32_t* slot_expert = nullptr;
  const float* slot_weight = nullptr;
  // [world]: rows received from each rank.
  const int32_t* counts = nullptr;
};

class CudaExpertAllToAll {
 public:
  // Collective: every rank of `bootstrap`'s group calls it with the same options (but device). INVALID_ARGUMENT
  // for bad options; FAILED_PRECONDITION without a usable GPU, when ranks disagree on the shape, or when a peer's
  // memory cannot be mapped; the wire's error when a peer does not answer.
  static absl::StatusOr<std::unique_ptr<CudaExpertAllToAll>> Create(std::unique_ptr<CollectiveWire> bootstrap,
                                                                    const CudaExpertAllToAllOptions& options);
  ~CudaExpertAllToAll();
  CudaExpertAllToAll(const CudaExpertAllToAll&) = delete;
  CudaExpertAllToAll& operator=(const CudaExpertAllToAll&) = delete;

  int rank() const;
  int world_size() const;
  int experts_per_rank() const { return options_.num_experts / world_size(); }
  const CudaExpertAllToAllOptions& options() const { return options_; }

  // Device buffers on this rank's GPU: `tokens` [num_tokens][hidden] elements (16-byte aligned), `topk_experts` and
  // `topk_weights` [num_tokens][topk] (expert ids in [0, num_experts) or -1 for an unused slot). Enqueues the
  // exchange on `stream` (a cudaStream_t; null: this exchange's own, a non-blocking stream that does not wait
  // for the legacy default stream: order your copies before the call) and returns where the result will be.
  // INVALID_ARGUMENT here for num_tokens outside 0..max_tokens or null buffers; what the GPU finds (a
  // non-finite token or weight, a bad expert id, a peer's error, a timeout, a disagreeing rank) comes back from
  // the next Synchronize.
  absl::StatusOr<CudaDispatchResult> DispatchAsync(const void* tokens, const int32_t* topk_experts,
                                                   const float* topk_weights, int num_tokens,
                                                   const CudaMoeCallOptions& options = {}, void* stream = nullptr);

  // `expert_out` [world * max_tokens][topk][hidden] elements, `out` [num_tokens of the Dispatch][hidden]
  // elements. INVALID_ARGUMENT for a result this exchange did not return or that is no longer valid, or null
  // buffers. Combining a result more than once is allowed, as long as every rank does.
  absl::Status CombineAsync(const CudaDispatchResult& dispatched, const void* expert_out, void* out,
                            const CudaMoeCallOptions& options = {}, void* stream = nullptr);

  // Waits for `stream` (null: this exchange's own) until `deadline`, then reports and clears the errors the
  // GPU recorded: INVALID_ARGUMENT (a non-finite token, bad routing, here or on a peer), DEADLINE_EXCEEDED (a
  // peer did not signal in time, or the stream did not finish by `deadline`: the group is then out of step),
  // FAILED_PRECONDITION (ranks disagree on the call).
  absl::Status Synchronize(void* stream, absl::Time deadline);

  // A finished Dispatch's result copied to the host in ExpertAllToAll's compact form (tokens as fp32, slots
  // listed per row). Call after Synchronize; INVALID_ARGUMENT for a result that is not valid here.
  absl::StatusOr<DispatchResult> ReadDispatch(const CudaDispatchResult& dispatched);

  // This exchange's stream (a cudaStream_t).
  void* stream() const;

 private:
  // One of the two alternating sets of per-Dispatch device state.
  struct Set {
    std::unique_ptr<DeviceBuffer> memory;
    internal::DispatchState state;  // arrays in `memory`
    CudaDispatchResult result;      // the same arrays, as the caller sees them
    int num_tokens = 0;
    bool valid = false;
  };

  CudaExpertAllToAll() = default;
  absl::Status Allocate();
  absl::Status CheckResult(const CudaDispatchResult& dispatched) const;
  // The peers, signal words and slots of Dispatch (or Combine) number `number`.
  internal::MoeCall MakeCall(bool dispatch, uint64_t number, uint64_t call_tag, absl::Duration timeout) const;

  CudaExpertAllToAllOptions options_;
  internal::MoeLayout layout_;
  // The calls' epochs (internal::MoeEpoch, kMoeEpochs of them) on the GPU, so a call captured in a CUDA graph
  // signals with a new epoch on every replay. Declared before group_, so freed after the group has drained its
  // stream and said goodbye.
  std::unique_ptr<DeviceBuffer> epochs_;
  std::unique_ptr<internal::CudaPeerGroup> group_;
  std::array<Set, 2> sets_;
  uint64_t dispatches_ = 0;
  uint64_t combines_ = 0;
  absl::Duration timeout_ = absl::Seconds(30);  // of the last call, for messages
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_CUDA_EXPERT_ALL_TO_ALL_H_
