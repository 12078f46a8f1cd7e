// The launch interface of the CUDA MoE Dispatch/Combine (cuda_moe_kernels.cu), plain C++ for
// cuda_expert_all_to_all.cc. Not API: use cuda_expert_all_to_all.h.
//
// Every rank's workspace holds, per buffer parity (calls alternate between two), a receive slot for every
// (source rank, source row) pair: [2][world][max_tokens] dispatch records and [2][world][max_tokens] combine
// rows. Its flag area holds, per parity, one signal word, one tag word and one count word per source rank.
//
// Dispatch is two kernels on one stream:
//   1. DispatchSend: each block routes a contiguous range of tokens (the row a token takes on rank d is the number
//      of earlier tokens bound for d, so rows keep source order), encodes each token once (FP8 E4M3 with per-group
//      fp32 scales, Fp8GroupQuantize's bytes, or raw elements) and stores its record (source index, its top-k
//      slots as seen by that rank, the payload) straight into the slot on every rank that holds one of its
//      experts. The last block to finish stores the row counts and signals every rank.
//   2. DispatchReceive: waits for every rank's signal, then decodes the received rows into this rank's output
//      (rank-major rows [src * max_tokens + i], their source index and slots, and the row count per source).
// Combine is two kernels:
//   3. CombineSend: for every received row, the weighted sum of its slots' expert outputs in top-k order (fp32,
//      rounded to the element type), stored into the token's rank's combine slot; the last block signals.
//   4. CombineReceive: waits for every rank's signal, then adds each token's partial sums in rank order (fp32)
//      into the output.
// Signals follow cuda_peer_signals.h (epoch * 4 + error bits, a call tag, bounded waits).
//
// Thread-safe (no host state).
#ifndef KVT_COLLECTIVE_CUDA_MOE_KERNELS_H_
#define KVT_COLLECTIVE_CUDA_MOE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "collective/cuda_all_reduce_kernels.h"
#include "collective/cuda_peer_signals.h"

namespace kvt::collective::internal {

// The shape every rank agrees on at creation.
struct MoeLayout {
  int world = 1, rank = 0;
  int hidden = 0;  // a multiple of 16
  int topk = 0;    // 1..32
  int experts_per_rank = 0;
  int max_tokens = 0;  // per rank and call
  DataType type = DataType::kBfloat16;
  bool fp8 = true;          // false: tokens travel as raw elements
  int group_size = 128;     // FP8 group: a power of two, 16..512
  uint32_t header_bytes = 0;  // record header: i32 source index, i32 0, topk x (i32 local expert or -1, f32 weight)
  uint32_t scale_bytes = 0;    // FP8: groups x f32 scale, padded to 16 bytes (the codes follow); raw: 0
  uint32_t payload_bytes = 0;  // FP8: scale_bytes + hidden codes; raw: hidden elements
  uint32_t record_bytes = 0;   // header + payload, 16-aligned
  uint32_t row_bytes = 0;      // a combine row: hidden elements
};

// Fills the derived sizes of `layout` (header, payload, record and row bytes).
void FinishMoeLayout(MoeLayout& layout);

// Bytes of one rank's workspace area: dispatch slots, then combine slots, both parities.
uint64_t MoeAreaBytes(const MoeLayout& layout);
// Offsets in that area of parity p's dispatch and combine slots.
uint64_t DispatchSlotsOffset(const MoeLayout& layout, int parity);
uint64_t CombineSlotsOffset(const MoeLayout& layout, int parity);

// Flag-area words (u64) of parity p: dispatch signal, tag and count words, combine signal and tag words; each
// kMaxCudaWorld long (one per source rank).
inline constexpr uint32_t DispatchSignalWord(int parity) { return (0 + parity) * kMaxCudaWorld; }
inline constexpr uint32_t DispatchTagWord(int parity) { return (2 + parity) * kMaxCudaWorld; }
inline constexpr uint32_t DispatchCountWord(int parity) { return (4 + parity) * kMaxCudaWorld; }
inline constexpr uint32_t CombineSignalWord(int parity) { return (6 + parity) * kMaxCudaWorld; }
inline constexpr uint32_t CombineTagWord(int parity) { return (8 + parity) * kMaxCudaWorld; }
inline constexpr size_t kMoeFlagBytes = 10 * kMaxCudaWorld * sizeof(uint64_t);

// What one rank keeps about one Dispatch (local device memory).
struct DispatchState {
  int32_t* positions = nullptr;    // [max_tokens][world]: the row each token took on each rank, -1 if not sent
  int32_t* sent_counts = nullptr;  // [world]: rows sent to each rank
  void* rows = nullptr;            // [world * max_tokens][hidden] elements: the received tokens, decoded
  int32_t* source_index = nullptr;  // [world * max_tokens]
  int32_t* slot_expert = nullptr;   // [world * max_tokens][topk]: local expert id, or -1
  float* slot_weight = nullptr;     // [world * max_tokens][topk]
  int32_t* counts = nullptr;        // [world]: rows received from each rank
};

// The epoch of one kind (Dispatch, Combine) and parity of call, in device memory, so that a call captured in a
// CUDA graph signals with a new epoch on every replay: both kernels of a call read epoch + 1 when they start (the
// send kernel after the previous call of its kind and parity has finished, being a plain launch; the receive
// kernel before its own blocks have all arrived), and the receive kernel's last block to arrive stores it. Zero
// at creation; kMoeEpochs of them: Dispatch parity 0 and 1, then Combine parity 0 and 1.
struct MoeEpoch {
  unsigned long long epoch;
  unsigned int arrivals;
  unsigned int unused;
};
inline constexpr int kMoeEpochs = 4;

// The peers and the call, common to all four kernels.
struct MoeCall {
  MoeLayout layout;
  uint8_t* slots[kMaxCudaWorld] = {};    // every rank's slots of this call's kind and parity, as mapped here
  uint64_t* flags[kMaxCudaWorld] = {};   // every rank's flag area
  uint32_t signal_word = 0, tag_word = 0, count_word = 0;
  MoeEpoch* epoch = nullptr;  // this call's kind and parity (device memory)
  uint64_t call_tag = 0, timeout_ns = 0;
  DeviceStatus* status = nullptr;
  int sms = 0;
};

// Loads every MoE kernel into the current device's context now. Under CUDA's lazy loading a kernel's first
// launch may wait for the kernels already running in the context, and these kernels wait on other GPUs, so the
// first launch must not happen in the middle of an exchange. INTERNAL when the runtime fails.
absl::Status LoadMoeKernels();

// Enqueues Dispatch's two kernels on `stream`: `tokens` [num_tokens][hidden] elements, `topk_experts` and
// `topk_weights` [num_tokens][topk] (device memory), num_tokens <= max_tokens. With `early_launch` the receive
// kernel is a programmatic dependent of the send kernel (its blocks start as the send's finish; it waits on the
// signals either way). Launch errors as INTERNAL.
absl::Status LaunchDispatch(const void* tokens, const int32_t* topk_experts, const float* topk_weights,
                            int num_tokens, const DispatchState& state, const MoeCall& call, bool early_launch,
                            void* stream);

// Enqueues Combine's two kernels: `expert_out` [world * max_tokens][topk][hidden] elements (slot k of row r at
// (r * topk + k)), `out` [num_tokens][hidden] elements, `state` the Dispatch's.
// `early_launch` as LaunchDispatch's.
absl::Status LaunchCombine(const void* expert_out, void* out, int num_tokens, const DispatchState& state,
                           const MoeCall& call, bool early_launch, void* stream);

}  // namespace kvt::collective::internal

#endif  // KVT_COLLECTIVE_CUDA_MOE_KERNELS_H_
