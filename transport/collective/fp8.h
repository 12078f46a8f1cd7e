// FP8 E4M3 (the OCP "E4M3FN" format that NVIDIA GPUs name float8_e4m3fn) and the per-group scaled FP8 codec
// that MoE dispatch sends tokens in. E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; the
// only NaN codes are 0x7f and 0xff; largest finite 448, smallest normal 2^-6, smallest subnormal 2^-9.
//
// Stateless and thread-safe.
//   std::vector<uint8_t> packed(Fp8GroupPackedSize(x.size(), 128));
//   KVT_RETURN_IF_ERROR(Fp8GroupQuantize(x, 128, absl::MakeSpan(packed)));
//   KVT_RETURN_IF_ERROR(Fp8GroupDequantize(packed, 128, absl::MakeSpan(y)));  // y.size() == x.size()
#ifndef KVT_TRANSPORT_COLLECTIVE_FP8_H_
#define KVT_TRANSPORT_COLLECTIVE_FP8_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kvt::collective {

inline constexpr float kFp8E4m3Max = 448.0f;

// Rounds `x` to the nearest E4M3 value, ties to even, saturating: every finite or infinite |x| beyond 448
// becomes ±448. NaN becomes 0x7f (with x's sign bit). -0 stays -0 (0x80).
uint8_t EncodeFp8E4m3(float x);

// The value of an E4M3 code (exact in fp32); NaN for 0x7f and 0xff.
float DecodeFp8E4m3(uint8_t code);

// Bytes Fp8GroupQuantize writes for n values in groups of group_size: one fp32 scale per group
// (little-endian), then n E4M3 codes.
size_t Fp8GroupPackedSize(size_t n, int group_size);

// Per group: scale = fp32(max|x| / 448) (0 for a group of zeros), moved up to the first float with
// fp32(max|x| / scale) <= 448 when the division rounded down, code = EncodeFp8E4m3(fp32(x / scale)), and Fp8GroupDequantize
// gives fp32(code value * scale). The error per value is at most 2^-4 |x| + 2^-10 scale, plus fp32 rounding
// (docs/COLLECTIVES.md). INVALID_ARGUMENT for a NaN or infinite input (naming its index), a group_size
// outside 1..65536 or an `out` of the wrong size.
absl::Status Fp8GroupQuantize(absl::Span<const float> in, int group_size, absl::Span<uint8_t> out);

// Decodes Fp8GroupPackedSize(out.size(), group_size) bytes of `in` into `out`; INVALID_ARGUMENT for a wrong
// size.
absl::Status Fp8GroupDequantize(absl::Span<const uint8_t> in, int group_size, absl::Span<float> out);

}  // namespace kvt::collective

#endif  // KVT_TRANSPORT_COLLECTIVE_FP8_H_
