// All-to-all Dispatch and Combine for mixture-of-experts layers over a CollectiveWire (docs/COLLECTIVES.md).
//
// Experts are split evenly over the ranks: expert e lives on rank e / (num_experts / world_size). Dispatch
// sends each token once to every rank that holds one of its top-k experts (however many it holds there),
// quantized on the fly (FP8 E4M3 with per-group scales, group-wise integers of 2..8 bits, or plain fp32),
// with its source index, the ids of its experts on that rank and their weights. The receive buffer is
// rank-major: first the tokens from rank 0 in their source order, then those from rank 1, and so on. Combine
// sends each row's weighted expert outputs back to the token's rank and sums them there, in a fixed order, so
// the result is deterministic.
//
// Double buffering: the exchange keeps two DispatchResults and uses them in turn, and every message carries
// the sequence number of its Dispatch. A DispatchResult stays valid until the second Dispatch after it, so
// the next micro-batch can be dispatched before this one is combined, with no synchronization in between.
//
// Threading: one thread at a time calls an ExpertAllToAll. Every rank makes the same calls in the same order
// with the same hidden, topk, num_experts and options; the number of tokens may differ between ranks.
//   KVT_ASSIGN_OR_RETURN(auto a2a, ExpertAllToAll::Create(hub->Wire(rank)));
//   KVT_ASSIGN_OR_RETURN(const DispatchResult* d, a2a->Dispatch(input, {.quant = DispatchQuant::kFp8}));
//   ... run expert d->slot_expert[s] on row r for every slot s in [d->slot_offsets[r], d->slot_offsets[r+1]),
//       writing expert_out[s * hidden, (s + 1) * hidden) ...
//   KVT_RETURN_IF_ERROR(a2a->Combine(*d, expert_out, absl::MakeSpan(combined)));  // [num_tokens, hidden]
#ifndef KVT_COLLECTIVE_MOE_H_
#define KVT_COLLECTIVE_MOE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collective/collective_wire.h"

namespace kvt::collective {

enum class DispatchQuant {
  kNone,  // fp32, exact
  kFp8,   // FP8 E4M3 with one fp32 scale per group (fp8.h)
  kInt,   // GroupQuantizer (quantizer.h) with `bits` bits
};

struct DispatchOptions {
  // How tokens travel. Default FP8.
  DispatchQuant quant = DispatchQuant::kFp8;
  // Code width for kInt, 2..8. Default 8.
  int bits = 8;
  // Values per quantization group for kFp8 and kInt, 1..65536; groups restart at every token. Default 128.
  int group_size = 128;
  // Spike reserving for kInt (QuantizerOptions::spike_reserve). Default off.
  bool spike_reserve = false;
  // How long the call may wait on its peers in total. Default 30 s.
  absl::Duration timeout = absl::Seconds(30);
};

// One rank's tokens and their routing.
struct DispatchInput {
  // [num_tokens, hidden], finite.
  absl::Span<const float> tokens;
  // [num_tokens, topk]: expert ids in [0, num_experts), or -1 for an unused slot.
  absl::Span<const int32_t> topk_experts;
  // [num_tokens, topk]: the weight of each slot (ignored for -1).
  absl::Span<const float> topk_weights;
  int hidden = 0;
  int topk = 0;
  // A multiple of the world size.
  int num_experts = 0;
};

// What one rank received: rows of tokens, rank-major, each with the slots (top-k entries) it owes this rank.
struct DispatchResult {
  // The Dispatch call this came from (0, 1, 2, ... per ExpertAllToAll).
  uint64_t sequence = 0;
  int hidden = 0;
  int experts_per_rank = 0;
  // Rows [rank_offsets[r], rank_offsets[r + 1]) came from rank r, in increasing source index. world_size + 1.
  std::vector<size_t> rank_offsets;
  // [num_rows, hidden]: the dequantized tokens.
  std::vector<float> tokens;
  // [num_rows]: the rank and index of each row's token at its source.
  std::vector<int32_t> source_rank;
  std::vector<int32_t> source_index;
  // Slots of row r: [slot_offsets[r], slot_offsets[r + 1]), in the token's top-k order. num_rows + 1.
  std::vector<size_t> slot_offsets;
  // [num_slots]: the local expert id (global id - rank * experts_per_rank) and the routing weight.
  std::vector<int32_t> slot_expert;
  std::vector<float> slot_weight;

  size_t num_rows() const { return source_index.size(); }
  size_t num_slots() const { return slot_expert.size(); }
};

struct CombineOptions {
  // How long the call may wait on its peers in total. Default 30 s.
  absl::Duration timeout = absl::Seconds(30);
};

class ExpertAllToAll {
 public:
  // Takes this rank's wire; INVALID_ARGUMENT for a null wire.
  static absl::StatusOr<std::unique_ptr<ExpertAllToAll>> Create(std::unique_ptr<CollectiveWire> wire);

  int rank() const { return wire_->rank(); }
  int world_size() const { return wire_->world_size(); }

  // Sends every token to the ranks of its experts and returns what this rank received. The result is owned
  // here and stays valid until the second Dispatch after this one. INVALID_ARGUMENT for bad sizes, options or
  // expert ids, or a non-finite token; FAILED_PRECONDITION when the ranks disagree on the call or its
  // parameters; UNAVAILABLE when a peer is gone; DEADLINE_EXCEEDED when one is silent past options.timeout.
  absl::StatusOr<const DispatchResult*> Dispatch(const DispatchInput& input, const DispatchOptions& options);

  // expert_outputs: [dispatched.num_slots(), hidden], the output of each slot's expert for its row, in slot
  // order. Writes out[t] = sum over token t's slots of weight * expert output, in fp32: each rank sums its
  // slots of the row in top-k order, and this rank adds those partial sums in rank order 0..N-1 (a token
  // routed nowhere gets 0). `out` is [num_tokens, hidden] of the Dispatch. `dispatched` must be a result this
  // exchange returned and that is still valid (not two Dispatches old: that is not detected);
  // INVALID_ARGUMENT for a result of another exchange or wrong sizes; FAILED_PRECONDITION when the ranks
  // disagree; the other errors as for Dispatch. Combining a result more than once is allowed, as long as
  // every rank does.
  absl::Status Combine(const DispatchResult& dispatched, absl::Span<const float> expert_outputs,
                       absl::Span<float> out, const CombineOptions& options = {});

 private:
  // One of the two alternating buffer sets: the received rows and what this rank sent where.
  struct BufferSet {
    DispatchResult result;
    // Constant for one Dispatch: the tokens this rank sent to each rank, in increasing index.
    std::vector<std::vector<int32_t>> sent;
    size_t num_tokens = 0;
    bool valid = false;
  };

  explicit ExpertAllToAll(std::unique_ptr<CollectiveWire> wire);

  // Constant after construction
  const std::unique_ptr<CollectiveWire> wire_;

  uint64_t dispatches_ = 0;
  std::array<BufferSet, 2> sets_;
  // Scratch, reused across calls: one message per rank.
  std::vector<std::vector<uint8_t>> outgoing_;
  std::vector<std::vector<uint8_t>> incoming_;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_MOE_H_
