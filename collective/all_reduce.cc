#include "collective/all_reduce.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "collective/call_tag.h"
#include "collective/quantizer.h"

namespace kvt::collective {
namespace {

constexpr size_t kTagBytes = 8;

// One step's encoding of a shard: group-quantized, or plain fp32 for width 0.
class ShardCodec {
 public:
  static absl::StatusOr<ShardCodec> Create(int bits, const AllReduceOptions& options) {
    if (bits == 0) return ShardCodec(std::nullopt);
    KVT_ASSIGN_OR_RETURN(
        GroupQuantizer quantizer,
        GroupQuantizer::Create(
            {.bits = bits, .group_size = options.group_size, .spike_reserve = options.spike_reserve}));
    return ShardCodec(quantizer);
  }

  size_t EncodedSize(size_t n) const { return quantizer_ ? quantizer_->PackedSize(n) : n * sizeof(float); }

  absl::Status Encode(absl::Span<const float> in, absl::Span<uint8_t> out) const {
    if (quantizer_) return quantizer_->Quantize(in, out);
    if (!in.empty()) std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<float> out) const {
    if (quantizer_) return quantizer_->Dequantize(in, out);
    if (!out.empty()) std::memcpy(out.data(), in.data(), out.size() * sizeof(float));
    return absl::OkStatus();
  }

 private:
  explicit ShardCodec(std::optional<GroupQuantizer> quantizer) : quantizer_(std::move(quantizer)) {}

  std::optional<GroupQuantizer> quantizer_;
};

// The tag every message of one step of one chunk of one call carries.
uint64_t MessageTag(uint64_t call, size_t chunk, int step, size_t n, const AllReduceOptions& options) {
  return CallTag(0x6b7674636f6c6cull,
                 {call, static_cast<uint64_t>(chunk), static_cast<uint64_t>(step), static_cast<uint64_t>(n),
                  static_cast<uint64_t>(options.step1_bits), static_cast<uint64_t>(options.step2_bits),
                  static_cast<uint64_t>(options.group_size), static_cast<uint64_t>(options.spike_reserve),
                  static_cast<uint64_t>(options.chunk_bytes)});
}

void WriteTag(uint64_t tag, std::vector<uint8_t>& message) { std::memcpy(message.data(), &tag, kTagBytes); }

absl::Status CheckTag(uint64_t tag, const std::vector<uint8_t>& message, int src) {
  uint64_t theirs;
  std::memcpy(&theirs, message.data(), kTagBytes);
  if (theirs != tag) {
    return absl::FailedPreconditionError(
        absl::StrFormat("rank %d is at a different AllReduce call, chunk or step (do all ranks pass the same "
                        "sizes and options "
                        "in the same order?)",
                        src));
  }
  return absl::OkStatus();
}

}  // namespace

ShardRange ShardOf(size_t n, int world_size, int shard) {
  const size_t base = n / world_size;
  const size_t extra = n % world_size;
  const size_t s = static_cast<size_t>(shard);
  return ShardRange{s * base + std::min(s, extra), base + (s < extra ? 1 : 0)};
}

absl::Status ValidateAllReduceOptions(const AllReduceOptions& options) {
  for (int bits : {options.step1_bits, options.step2_bits}) {
    if (bits != 0 && (bits < 2 || bits > 8)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("AllReduce step width must be 0 or 2..8, got %d", bits));
    }
  }
  if (options.group_size < 1 || options.group_size > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AllReduce group_size must be 1..65536, got %d", options.group_size));
  }
  if (options.chunk_bytes < sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AllReduce chunk_bytes must hold a value, got %d", options.chunk_bytes));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("AllReduce timeout must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WireCommunicator>> WireCommunicator::Create(
    std::unique_ptr<CollectiveWire> wire) {
  if (wire == nullptr) return absl::InvalidArgumentError("WireCommunicator needs a wire");
  return std::unique_ptr<WireCommunicator>(new WireCommunicator(std::move(wire)));
}

absl::Status WireCommunicator::AllReduce(absl::Span<const float> in, absl::Span<float> out,
                                         const AllReduceOptions& options) {
  KVT_RETURN_IF_ERROR(ValidateAllReduceOptions(options));
  if (in.size() != out.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AllReduce input has %d values, output %d", in.size(), out.size()));
  }
  if (in.data() != out.data() && in.data() < out.data() + out.size() && out.data() < in.data() + in.size()) {
    return absl::InvalidArgumentError("AllReduce input and output overlap without being the same buffer");
  }
  KVT_ASSIGN_OR_RETURN(const ShardCodec step1, ShardCodec::Create(options.step1_bits, options));
  KVT_ASSIGN_OR_RETURN(const ShardCodec step2, ShardCodec::Create(options.step2_bits, options));
  const int me = rank();
  const int world = world_size();
  const uint64_t call = calls_++;
  const absl::Time deadline = absl::Now() + options.timeout;
  const size_t chunk_values = options.chunk_bytes / sizeof(float);
  packed_.resize(world);

  for (size_t chunk_begin = 0, chunk = 0; chunk_begin < in.size(); chunk_begin += chunk_values, ++chunk) {
    const size_t n = std::min(chunk_values, in.size() - chunk_begin);
    const absl::Span<const float> chunk_in = in.subspan(chunk_begin, n);
    const absl::Span<float> chunk_out = out.subspan(chunk_begin, n);
    const ShardRange mine = ShardOf(n, world, me);

    // Step 1: all-to-all of the step-1 encodings; shard j goes to rank j.
    const uint64_t tag1 = MessageTag(call, chunk, 1, in.size(), options);
    for (int j = 0; j < world; ++j) {
      const ShardRange shard = ShardOf(n, world, j);
      std::vector<uint8_t>& message = packed_[j];
      message.resize(kTagBytes + step1.EncodedSize(shard.size));
      WriteTag(tag1, message);
      KVT_RETURN_IF_ERROR(step1.Encode(chunk_in.subspan(shard.begin, shard.size),
                                       absl::MakeSpan(message).subspan(kTagBytes)));
      if (j != me) KVT_RETURN_IF_ERROR(wire_->Send(j, message, deadline));
    }
    // Our own encoding stays in packed_[me]; the others' arrive in their slots. Sum in rank order.
    decoded_.resize(mine.size);
    sum_.assign(mine.size, 0.0f);
    for (int r = 0; r < world; ++r) {
      std::vector<uint8_t>& message = packed_[r];
      if (r != me) {
        message.resize(kTagBytes + step1.EncodedSize(mine.size));
        KVT_RETURN_IF_ERROR(wire_->Receive(r, absl::MakeSpan(message), deadline));
        KVT_RETURN_IF_ERROR(CheckTag(tag1, message, r));
      }
      KVT_RETURN_IF_ERROR(
          step1.Decode(absl::MakeConstSpan(message).subspan(kTagBytes), absl::MakeSpan(decoded_)));
      if (r == 0) {
        sum_ = decoded_;
      } else {
        for (size_t i = 0; i < mine.size; ++i) sum_[i] += decoded_[i];
      }
    }

    // Step 2: all-gather of the step-2 encodings of the reduced shards.
    const uint64_t tag2 = MessageTag(call, chunk, 2, in.size(), options);
    std::vector<uint8_t>& reduced = packed_[me];
    reduced.resize(kTagBytes + step2.EncodedSize(mine.size));
    WriteTag(tag2, reduced);
    KVT_RETURN_IF_ERROR(step2.Encode(sum_, absl::MakeSpan(reduced).subspan(kTagBytes)));
    for (int j = 0; j < world; ++j) {
      if (j != me) KVT_RETURN_IF_ERROR(wire_->Send(j, reduced, deadline));
    }
    for (int r = 0; r < world; ++r) {
      const ShardRange shard = ShardOf(n, world, r);
      std::vector<uint8_t>& message = packed_[r];
      if (r != me) {
        message.resize(kTagBytes + step2.EncodedSize(shard.size));
        KVT_RETURN_IF_ERROR(wire_->Receive(r, absl::MakeSpan(message), deadline));
        KVT_RETURN_IF_ERROR(CheckTag(tag2, message, r));
      }
      KVT_RETURN_IF_ERROR(step2.Decode(absl::MakeConstSpan(message).subspan(kTagBytes),
                                       chunk_out.subspan(shard.begin, shard.size)));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::collective
