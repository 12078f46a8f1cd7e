// FP8 E4M3, the OCP "E4M3FN" format (NVIDIA's float8_e4m3fn): 1 sign, 4 exponent (bias 7) and 3 mantissa bits;
// no infinities; the only NaN codes are 0x7F and 0xFF; largest finite 448, smallest normal 2^-6, smallest
// subnormal 2^-9. The one definition of the conversion for the codec's fp8 scheme (docs/FORMAT.md), its CUDA
// kernels, and the collectives' FP8 dispatch (host and GPU): each includes this header, so their bytes agree by
// construction. Pure functions; host and device (numerics/host_device.h).
#ifndef KVT_NUMERICS_E4M3_H_
#define KVT_NUMERICS_E4M3_H_

#include <cstdint>

#include "numerics/bits.h"
#include "numerics/host_device.h"

namespace kvt::numerics {

inline constexpr float kE4m3Max = 448.0f;

KVT_HOST_DEVICE bool E4m3IsNan(uint32_t code) { return (code & 0x7Fu) == 0x7Fu; }

// The value of a code (exact in f32); NaN (with the code's sign) for 0x7F and 0xFF. Only the low 8 bits of
// `code` are read.
KVT_HOST_DEVICE float E4m3ToFloat(uint32_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xFu;
  const uint32_t mantissa = code & 7u;
  if (exponent == 0xFu && mantissa == 7u) return BitsToFloat(sign | 0x7FC00000u);
  if (exponent == 0) {
    // Subnormal: mantissa * 2^-9, exact (and -0 for 0x80).
    return BitsToFloat(sign | FloatBits(static_cast<float>(mantissa) * 0x1p-9f));
  }
  return BitsToFloat(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// The code nearest to x, ties to even, saturating: every |x| >= 448 (infinities included) becomes +-448
// (0x7E / 0xFE). NaN becomes 0x7F with x's sign bit; -0 gives 0x80.
KVT_HOST_DEVICE uint8_t FloatToE4m3(float x) {
  const uint32_t bits = FloatBits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  const float a = BitsToFloat(magnitude);
  if (a >= kE4m3Max) return static_cast<uint8_t>(sign | 0x7Eu);
  if (a < 0x1p-6f) {
    // Subnormal range, units of 2^-9: a * 512 is exact; 8 units round into the smallest normal, whose code
    // (exponent 1, mantissa 0) is 8 as well.
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(RoundHalfEven(a * 512.0f)));
  }
  // Normal: keep 3 of f32's 23 mantissa bits, half to even on the 20 dropped; a carry moves into the exponent.
  // a < 448 keeps the result at or below 448 (0x7E): 448 < a < 464 would round down, and is saturated above.
  const uint32_t rounded = (magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | (rounded - (120u << 3)));
}

}  // namespace kvt::numerics

#endif  // KVT_NUMERICS_E4M3_H_
