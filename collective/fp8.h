// The per-group scaled FP8 codec that MoE dispatch sends tokens in. The E4M3 conversion itself (the OCP "E4M3FN"
// format) is numerics/e4m3.h, the one the codec's fp8 scheme and every kernel use.
//
// Stateless and thread-safe.
//   std::vector<uint8_t> packed(Fp8GroupPackedSize(x.size(), 128));
//   KVT_RETURN_IF_ERROR(Fp8GroupQuantize(x, 128, absl::MakeSpan(packed)));
//   KVT_RETURN_IF_ERROR(Fp8GroupDequantize(packed, 128, absl::MakeSpan(y)));  // y.size() == x.size()
#ifndef KVT_COLLECTIVE_FP8_H_
#define KVT_COLLECTIVE_FP8_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kvt::collective {

// Bytes Fp8GroupQuantize writes for n values in groups of group_size: one fp32 scale per group
// (little-endian), then n E4M3 codes.
size_t Fp8GroupPackedSize(size_t n, int group_size);

// Per group: scale = fp32(max|x| / 448) (0 for a group of zeros), moved up to the first float with
// fp32(max|x| / scale) <= 448 when the division rounded down, code = numerics::FloatToE4m3(fp32(x / scale)), and
// Fp8GroupDequantize gives fp32(code value * scale). The error per value is at most 2^-4 |x| + 2^-10 scale,
// plus fp32 rounding (docs/COLLECTIVES.md). INVALID_ARGUMENT for a NaN or infinite input (naming its index), a group_size
// outside 1..65536 or an `out` of the wrong size.
absl::Status Fp8GroupQuantize(absl::Span<const float> in, int group_size, absl::Span<uint8_t> out);

// Decodes Fp8GroupPackedSize(out.size(), group_size) bytes of `in` into `out`; INVALID_ARGUMENT for a wrong
// size.
absl::Status Fp8GroupDequantize(absl::Span<const uint8_t> in, int group_size, absl::Span<float> out);

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_FP8_H_
