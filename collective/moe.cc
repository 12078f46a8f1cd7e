#include "collective/moe.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "collective/call_tag.h"
#include "collective/fp8.h"
#include "collective/quantizer.h"

namespace kvt::collective {
namespace {

constexpr size_t kTagBytes = 8;

enum class Step : uint64_t { kDispatchCount = 1, kDispatchTokens = 2, kCombine = 3 };

// The tag of every message of one step of one Dispatch (and its Combines): the sequence number and every
// parameter the ranks must agree on.
uint64_t MessageTag(Step step, uint64_t sequence, const DispatchInput& input,
                    const DispatchOptions& options) {
  return CallTag(0x6b76746d6f65ull,
                 {static_cast<uint64_t>(step), sequence, static_cast<uint64_t>(input.hidden),
                  static_cast<uint64_t>(input.topk), static_cast<uint64_t>(input.num_experts),
                  static_cast<uint64_t>(options.quant), static_cast<uint64_t>(options.bits),
                  static_cast<uint64_t>(options.group_size), static_cast<uint64_t>(options.spike_reserve)});
}

uint64_t CombineTag(uint64_t sequence, int hidden) {
  return CallTag(0x6b76746d6f65ull, {static_cast<uint64_t>(Step::kCombine), sequence, static_cast<uint64_t>(hidden)});
}

void WriteTag(uint64_t tag, std::vector<uint8_t>& message) { std::memcpy(message.data(), &tag, kTagBytes); }

absl::Status CheckTag(uint64_t tag, absl::Span<const uint8_t> message, int src, absl::string_view what) {
  uint64_t theirs;
  std::memcpy(&theirs, message.data(), kTagBytes);
  if (theirs != tag) {
    return absl::FailedPreconditionError(
        absl::StrFormat("rank %d is at a different %s (do all ranks make the same calls with the same "
                        "hidden, topk, num_experts "
                        "and options?)",
                        src, what));
  }
  return absl::OkStatus();
}

// How one token row travels.
class TokenCodec {
 public:
  static absl::StatusOr<TokenCodec> Create(const DispatchOptions& options, int hidden) {
    std::optional<GroupQuantizer> quantizer;
    size_t bytes = static_cast<size_t>(hidden) * sizeof(float);
    switch (options.quant) {
      case DispatchQuant::kNone:
        break;
      case DispatchQuant::kFp8:
        if (options.group_size < 1 || options.group_size > (1 << 16)) {
          return absl::InvalidArgumentError(
              absl::StrFormat("Dispatch group_size must be 1..65536, got %d", options.group_size));
        }
        bytes = Fp8GroupPackedSize(hidden, options.group_size);
        break;
      case DispatchQuant::kInt: {
        KVT_ASSIGN_OR_RETURN(quantizer, GroupQuantizer::Create({.bits = options.bits,
                                                                .group_size = options.group_size,
                                                                .spike_reserve = options.spike_reserve}));
        bytes = quantizer->PackedSize(hidden);
        break;
      }
      default:
        return absl::InvalidArgumentError("Dispatch quant is not a DispatchQuant");
    }
    return TokenCodec(options, std::move(quantizer), bytes);
  }

  size_t bytes() const { return bytes_; }

  absl::Status Encode(absl::Span<const float> in, absl::Span<uint8_t> out) const {
    switch (options_.quant) {
      case DispatchQuant::kFp8:
        return Fp8GroupQuantize(in, options_.group_size, out);
      case DispatchQuant::kInt:
        return quantizer_->Quantize(in, out);
      default:
        std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
        return absl::OkStatus();
    }
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<float> out) const {
    switch (options_.quant) {
      case DispatchQuant::kFp8:
        return Fp8GroupDequantize(in, options_.group_size, out);
      case DispatchQuant::kInt:
        return quantizer_->Dequantize(in, out);
      default:
        std::memcpy(out.data(), in.data(), out.size() * sizeof(float));
        return absl::OkStatus();
    }
  }

 private:
  TokenCodec(const DispatchOptions& options, std::optional<GroupQuantizer> quantizer, size_t bytes)
      : options_(options), quantizer_(std::move(quantizer)), bytes_(bytes) {}

  DispatchOptions options_;
  std::optional<GroupQuantizer> quantizer_;
  size_t bytes_;
};

absl::Status ValidateDispatch(const DispatchInput& input, const DispatchOptions& options, int world) {
  if (input.hidden < 1 || input.topk < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Dispatch needs hidden >= 1 and topk >= 1, got %d and %d", input.hidden, input.topk));
  }
  if (input.num_experts < world || input.num_experts % world != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Dispatch num_experts %d is not a positive multiple of the world size %d", input.num_experts, world));
  }
  if (input.topk_experts.size() % input.topk != 0 || input.topk_weights.size() != input.topk_experts.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Dispatch topk_experts has %d entries and topk_weights %d, for topk %d",
                        input.topk_experts.size(), input.topk_weights.size(), input.topk));
  }
  const size_t num_tokens = input.topk_experts.size() / input.topk;
  if (input.tokens.size() != num_tokens * input.hidden) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Dispatch tokens has %d values, %d tokens of hidden %d need %d", input.tokens.size(),
                        num_tokens, input.hidden, num_tokens * input.hidden));
  }
  for (size_t i = 0; i < input.topk_experts.size(); ++i) {
    const int32_t e = input.topk_experts[i];
    if (e < -1 || e >= input.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Dispatch topk_experts[%d] is %d, not in [-1, %d)", i, e, input.num_experts));
    }
    if (e >= 0 && !std::isfinite(input.topk_weights[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Dispatch topk_weights[%d] is %f", i, input.topk_weights[i]));
    }
  }
  if (options.quant == DispatchQuant::kInt && (options.bits < 2 || options.bits > 8)) {
    return absl::InvalidArgumentError(absl::StrFormat("Dispatch bits must be 2..8, got %d", options.bits));
  }
  if (options.timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("Dispatch timeout must be positive");
  return absl::OkStatus();
}

}  // namespace

ExpertAllToAll::ExpertAllToAll(std::unique_ptr<CollectiveWire> wire)
    : wire_(std::move(wire)), outgoing_(wire_->world_size()), incoming_(wire_->world_size()) {}

absl::StatusOr<std::unique_ptr<ExpertAllToAll>> ExpertAllToAll::Create(std::unique_ptr<CollectiveWire> wire) {
  if (wire == nullptr) return absl::InvalidArgumentError("ExpertAllToAll needs a wire");
  return std::unique_ptr<ExpertAllToAll>(new ExpertAllToAll(std::move(wire)));
}

// Message layout. Count (one per peer): tag, u64 rows. Tokens (one per rank that gets rows): tag, then per
// row in increasing source index: i32 source index, topk x (i32 local expert or -1 when that slot's expert is
// on another rank, f32 weight), then the encoded token.
absl::StatusOr<const DispatchResult*> ExpertAllToAll::Dispatch(const DispatchInput& input,
                                                               const DispatchOptions& options) {
  const int me = rank();
  const int world = world_size();
  KVT_RETURN_IF_ERROR(ValidateDispatch(input, options, world));
  KVT_ASSIGN_OR_RETURN(const TokenCodec codec, TokenCodec::Create(options, input.hidden));
  const absl::Time deadline = absl::Now() + options.timeout;
  const size_t num_tokens = input.topk_experts.size() / input.topk;
  const int experts_per_rank = input.num_experts / world;
  const size_t record_bytes = sizeof(int32_t) + input.topk * 2 * sizeof(int32_t) + codec.bytes();
  const uint64_t sequence = dispatches_++;
  BufferSet& set = sets_[sequence % 2];
  set.valid = false;
  set.num_tokens = num_tokens;
  set.sent.assign(world, {});

  // Route: token t goes to every rank that holds one of its experts, once.
  // Tokens are visited in order, so a token already bound for `dst` is the last entry of its list.
  for (size_t t = 0; t < num_tokens; ++t) {
    for (int k = 0; k < input.topk; ++k) {
      const int32_t e = input.topk_experts[t * input.topk + k];
      if (e < 0) continue;
      std::vector<int32_t>& list = set.sent[e / experts_per_rank];
      if (list.empty() || list.back() != static_cast<int32_t>(t)) list.push_back(static_cast<int32_t>(t));
    }
  }

  // Encode one message per rank, and send the counts and tokens to the peers.
  const uint64_t count_tag = MessageTag(Step::kDispatchCount, sequence, input, options);
  const uint64_t tokens_tag = MessageTag(Step::kDispatchTokens, sequence, input, options);
  for (int dst = 0; dst < world; ++dst) {
    const std::vector<int32_t>& list = set.sent[dst];
    std::vector<uint8_t>& message = outgoing_[dst];
    message.assign(kTagBytes + list.size() * record_bytes, 0);
    WriteTag(tokens_tag, message);
    uint8_t* p = message.data() + kTagBytes;
    for (const int32_t t : list) {
      std::memcpy(p, &t, sizeof(t));
      p += sizeof(int32_t);
      for (int k = 0; k < input.topk; ++k) {
        const int32_t e = input.topk_experts[t * input.topk + k];
        const int32_t local = (e >= 0 && e / experts_per_rank == dst) ? e - dst * experts_per_rank : -1;
        const float weight = local >= 0 ? input.topk_weights[t * input.topk + k] : 0.0f;
        std::memcpy(p, &local, sizeof(local));
        std::memcpy(p + sizeof(int32_t), &weight, sizeof(weight));
        p += 2 * sizeof(int32_t);
      }
      KVT_RETURN_IF_ERROR(
          codec.Encode(input.tokens.subspan(static_cast<size_t>(t) * input.hidden, input.hidden),
                       absl::MakeSpan(p, codec.bytes())));
      p += codec.bytes();
    }
    if (dst == me) continue;
    std::vector<uint8_t> count(kTagBytes + sizeof(uint64_t));
    WriteTag(count_tag, count);
    const uint64_t rows = list.size();
    std::memcpy(count.data() + kTagBytes, &rows, sizeof(rows));
    KVT_RETURN_IF_ERROR(wire_->Send(dst, count, deadline));
    if (rows > 0) KVT_RETURN_IF_ERROR(wire_->Send(dst, message, deadline));
  }

  // Receive, rank by rank, and unpack into the rank-major result.
  DispatchResult& result = set.result;
  result.sequence = sequence;
  result.hidden = input.hidden;
  result.experts_per_rank = experts_per_rank;
  result.rank_offsets.assign(1, 0);
  result.tokens.clear();
  result.source_rank.clear();
  result.source_index.clear();
  result.slot_offsets.assign(1, 0);
  result.slot_expert.clear();
  result.slot_weight.clear();
  for (int src = 0; src < world; ++src) {
    uint64_t rows = set.sent[me].size();
    absl::Span<const uint8_t> message = outgoing_[me];
    if (src != me) {
      std::vector<uint8_t> count(kTagBytes + sizeof(uint64_t));
      KVT_RETURN_IF_ERROR(wire_->Receive(src, absl::MakeSpan(count), deadline));
      KVT_RETURN_IF_ERROR(CheckTag(count_tag, count, src, "Dispatch"));
      std::memcpy(&rows, count.data() + kTagBytes, sizeof(rows));
      if (rows > (uint64_t{1} << 31)) {
        return absl::DataLossError(absl::StrFormat("rank %d announced %d rows", src, rows));
      }
      std::vector<uint8_t>& in = incoming_[src];
      in.resize(kTagBytes + rows * record_bytes);
      if (rows > 0) {
        KVT_RETURN_IF_ERROR(wire_->Receive(src, absl::MakeSpan(in), deadline));
        KVT_RETURN_IF_ERROR(CheckTag(tokens_tag, in, src, "Dispatch"));
      }
      message = in;
    }
    const size_t first_row = result.source_index.size();
    result.tokens.resize((first_row + rows) * input.hidden);
    const uint8_t* p = message.data() + kTagBytes;
    for (uint64_t row = 0; row < rows; ++row) {
      int32_t index;
      std::memcpy(&index, p, sizeof(index));
      p += sizeof(int32_t);
      result.source_rank.push_back(src);
      result.source_index.push_back(index);
      for (int k = 0; k < input.topk; ++k) {
        int32_t local;
        float weight;
        std::memcpy(&local, p, sizeof(local));
        std::memcpy(&weight, p + sizeof(int32_t), sizeof(weight));
        p += 2 * sizeof(int32_t);
        if (local < -1 || local >= experts_per_rank) {
          return absl::DataLossError(absl::StrFormat("rank %d sent local expert %d", src, local));
        }
        if (local < 0) continue;
        result.slot_expert.push_back(local);
        result.slot_weight.push_back(weight);
      }
      result.slot_offsets.push_back(result.slot_expert.size());
      KVT_RETURN_IF_ERROR(codec.Decode(
          absl::MakeSpan(p, codec.bytes()),
          absl::MakeSpan(result.tokens).subspan((first_row + row) * input.hidden, input.hidden)));
      p += codec.bytes();
    }
    result.rank_offsets.push_back(result.source_index.size());
  }
  set.valid = true;
  return &result;
}

absl::Status ExpertAllToAll::Combine(const DispatchResult& dispatched, absl::Span<const float> expert_outputs,
                                     absl::Span<float> out, const CombineOptions& options) {
  BufferSet& set = sets_[dispatched.sequence % 2];
  if (&dispatched != &set.result || !set.valid) {
    return absl::InvalidArgumentError("Combine needs a DispatchResult that this exchange returned");
  }
  if (options.timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("Combine timeout must be positive");
  const int me = rank();
  const int world = world_size();
  const size_t hidden = dispatched.hidden;
  if (expert_outputs.size() != dispatched.num_slots() * hidden) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Combine expert_outputs has %d values, %d slots need %d", expert_outputs.size(),
                        dispatched.num_slots(), dispatched.num_slots() * hidden));
  }
  if (out.size() != set.num_tokens * hidden) {
    return absl::InvalidArgumentError(absl::StrFormat("Combine out has %d values, %d tokens need %d",
                                                      out.size(), set.num_tokens, set.num_tokens * hidden));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  const uint64_t tag = CombineTag(dispatched.sequence, dispatched.hidden);

  // Expert side: per source rank, one partial sum per row (its slots in top-k order), sent back.
  for (int src = 0; src < world; ++src) {
    const size_t begin = dispatched.rank_offsets[src];
    const size_t end = dispatched.rank_offsets[src + 1];
    if (begin == end) continue;
    std::vector<uint8_t>& message = outgoing_[src];
    message.assign(kTagBytes + (end - begin) * hidden * sizeof(float), 0);
    WriteTag(tag, message);
    std::vector<float> partial(hidden);
    for (size_t row = begin; row < end; ++row) {
      std::fill(partial.begin(), partial.end(), 0.0f);
      for (size_t s = dispatched.slot_offsets[row]; s < dispatched.slot_offsets[row + 1]; ++s) {
        const float w = dispatched.slot_weight[s];
        const float* y = expert_outputs.data() + s * hidden;
        for (size_t i = 0; i < hidden; ++i) partial[i] += w * y[i];
      }
      std::memcpy(message.data() + kTagBytes + (row - begin) * hidden * sizeof(float), partial.data(),
                  hidden * sizeof(float));
    }
    if (src != me) KVT_RETURN_IF_ERROR(wire_->Send(src, message, deadline));
  }

  // Token side: add the partial sums in rank order.
  std::fill(out.begin(), out.end(), 0.0f);
  for (int dst = 0; dst < world; ++dst) {
    const std::vector<int32_t>& list = set.sent[dst];
    if (list.empty()) continue;
    std::vector<uint8_t>& message = dst == me ? outgoing_[me] : incoming_[dst];
    if (dst != me) {
      message.resize(kTagBytes + list.size() * hidden * sizeof(float));
      KVT_RETURN_IF_ERROR(wire_->Receive(dst, absl::MakeSpan(message), deadline));
      KVT_RETURN_IF_ERROR(CheckTag(tag, message, dst, "Combine"));
    }
    for (size_t row = 0; row < list.size(); ++row) {
      float* o = out.data() + static_cast<size_t>(list[row]) * hidden;
      const uint8_t* p = message.data() + kTagBytes + row * hidden * sizeof(float);
      for (size_t i = 0; i < hidden; ++i) {
        float v;
        std::memcpy(&v, p + i * sizeof(float), sizeof(v));
        o[i] += v;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::collective
