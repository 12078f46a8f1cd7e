// Scalar conversions between float and the small formats the codec stores: IEEE fp16 (int8/int4 metadata),
// bf16 (the bf16 scheme) and OCP fp8 e4m3 (the fp8 scheme). Exact, branchy, portable: the spec for every
// vectorized or CUDA conversion. Pure functions; thread-safe.
#ifndef KVT_CODEC_INTERNAL_FLOAT_FORMATS_H_
#define KVT_CODEC_INTERNAL_FLOAT_FORMATS_H_

#include <cstdint>

namespace kvt::codec::internal {

// fp16 bits -> float (exact; inf/NaN map to inf/NaN).
float F16ToFloat(uint16_t h);

enum class F16Round { kNearestEven, kDown, kUp };
// Finite float -> fp16 bits with the given rounding, saturating to +-65504 (never produces inf or NaN).
uint16_t FloatToF16(float x, F16Round mode);

// bf16 bits -> float (exact).
float Bf16ToFloat(uint16_t b);
// Finite float -> bf16 bits, round to nearest even, saturating to +-max finite bf16 (0x7F7F) instead of inf.
uint16_t FloatToBf16(float x);

// e4m3 (bias 7, no inf, 0x7F/0xFF are NaN) -> float; NaN codes give NaN.
float E4m3ToFloat(uint8_t code);
inline bool E4m3IsNan(uint8_t code) { return (code & 0x7F) == 0x7F; }
// Finite float -> e4m3, round to nearest even, saturating to +-448 (never produces NaN). -0 gives 0x80.
uint8_t FloatToE4m3(float x);

uint32_t FloatBits(float x);
float BitsToFloat(uint32_t b);

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_FLOAT_FORMATS_H_
