// Group-wise asymmetric integer quantization of float32 for the collective module's wire (Flash
// Communication). Every `group_size` consecutive values share an fp32 minimum and scale; each value becomes
// an unsigned code of `bits` (2..8) bits, q = round_half_even((x - min) * inv) with inv = fp32(1 / scale), and
// dequantizes to fmaf(q, scale, min). The arithmetic is fp32, one rounding per operation, so a GPU computes the
// same bytes cheaply; groups whose range or inverse scale fp32 cannot hold fall back to double. The error per
// value is at most scale * (1/2 + kQuantizerCodeSlack) plus the fp32 rounding of the result. Codes are stored
// by bit splitting into planes of 8, 4, 2 and 1 bits: 8 = 8, 7 = 4+2+1, 6 = 4+2, 5 = 4+1, 4 = 4, 3 = 2+1, 2 =
// 2, the high bits in the widest plane, so a width costs exactly `bits` bits per value and every plane is a
// plain byte-aligned array.
//
// Optional spike reserving: each group's value of largest magnitude (the first if tied) travels exactly, with
// its index, and is left out of the group's min and max, so one outlier does not widen the whole group's
// scale.
//
// Stateless and thread-compatible; the same input and options give the same bytes on every machine.
//   KVT_ASSIGN_OR_RETURN(GroupQuantizer q, GroupQuantizer::Create({.bits = 4}));
//   std::vector<uint8_t> packed(q.PackedSize(x.size()));
//   KVT_RETURN_IF_ERROR(q.Quantize(x, absl::MakeSpan(packed)));
//   KVT_RETURN_IF_ERROR(q.Dequantize(packed, absl::MakeSpan(y)));  // y.size() == x.size()
#ifndef KVT_COLLECTIVE_QUANTIZER_H_
#define KVT_COLLECTIVE_QUANTIZER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvt::collective {

// How far past half a code step the fp32 quantizer's rounding of (x - min) * inv can move a value's code: three
// roundings of at most 2^-24 relative each, on a quotient of at most 255.
inline constexpr double kQuantizerCodeSlack = 0x1p-14;

struct QuantizerOptions {
  // Code width in bits, 2..8.
  int bits = 8;
  // Values per group (1..65536); the last group of a buffer may be shorter.
  int group_size = 128;
  // Send each group's largest-magnitude value exactly, outside the group's range.
  bool spike_reserve = false;
};

// The packed layout of n values, in order: one header per group (fp32 min, fp32 scale, and with spike
// reserving fp32 spike value and uint32 index within the group; little-endian), then the planes, widest
// first, each ceil(n * plane_bits / 8) bytes with value i at bit (i * plane_bits) % 8 of byte i * plane_bits
// / 8.
class GroupQuantizer {
 public:
  // INVALID_ARGUMENT when bits or group_size is out of range.
  static absl::StatusOr<GroupQuantizer> Create(const QuantizerOptions& options);

  const QuantizerOptions& options() const { return options_; }

  // Bytes that Quantize writes for n values.
  size_t PackedSize(size_t n) const;

  // Quantizes `in` into out[0, PackedSize(in.size())). INVALID_ARGUMENT for a NaN or infinite input (naming
  // its index) or an `out` of the wrong size.
  absl::Status Quantize(absl::Span<const float> in, absl::Span<uint8_t> out) const;

  // Dequantizes PackedSize(out.size()) bytes of `in` into `out`. INVALID_ARGUMENT when `in` has the wrong
  // size. Deterministic: the same bytes give bitwise the same floats on every rank.
  absl::Status Dequantize(absl::Span<const uint8_t> in, absl::Span<float> out) const;

 private:
  explicit GroupQuantizer(const QuantizerOptions& options) : options_(options) {}

  size_t HeaderSize() const { return options_.spike_reserve ? 16 : 8; }

  QuantizerOptions options_;
};

// The planes that hold a code of `bits` bits, widest first: {4, 2, 1} for 7. Writes them to planes[0, count)
// and returns count (at most 3). Exposed for tests.
int PlaneWidths(int bits, int planes[3]);

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_QUANTIZER_H_
