// The codec's 16-bit formats, saturating: IEEE fp16 with a chosen rounding (the int8/int4 schemes' chunk min
// and scale, docs/FORMAT.md) and bf16 rounded to nearest even (the bf16 scheme; the collectives' bf16 and fp16
// buffers). Exact, branchy, portable: one definition for the CPU reference, the codec's CUDA kernels and the
// collectives (host and device, numerics/host_device.h). Engine KV blocks convert with IEEE overflow to inf
// instead, in bulk: kv/float16.h. Pure functions; thread-safe.
#ifndef KVT_NUMERICS_FLOAT16_H_
#define KVT_NUMERICS_FLOAT16_H_

#include <cstdint>

#include "numerics/bits.h"
#include "numerics/host_device.h"

namespace kvt::numerics {

// fp16 bits -> float (exact; inf/NaN map to inf/NaN).
KVT_HOST_DEVICE float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0x1p-24f;  // zero or subnormal, exact
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7F800000u | (mant << 13));
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

namespace float16_internal {

// Round-to-nearest-even float -> fp16 magnitude bits for finite |x|, without saturation (may give 0x7C00).
KVT_HOST_DEVICE uint16_t F16NearestMagnitude(float ax) {
  const uint32_t b = FloatBits(ax);
  const int32_t exp = static_cast<int32_t>(b >> 23) - 127;
  if (exp < -25) return 0;  // below half the smallest subnormal (2^-25): rounds to 0
  if (exp < -14) {
    // Subnormal range: value / 2^-24 (exact: a power-of-two scale), rounded to nearest even; 1024 becomes the
    // smallest normal, which is the right encoding.
    return static_cast<uint16_t>(RoundHalfEven(ax * 16777216.0f));
  }
  if (exp > 15) return 0x7C00;
  const uint32_t mant = b & 0x7FFFFF;
  uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carries into the exponent correctly
  return static_cast<uint16_t>(h);
}

}  // namespace float16_internal

enum class F16Round : int { kNearestEven = 0, kDown = 1, kUp = 2 };

// Finite float -> fp16 bits with the given rounding, saturating to +-65504 (never produces inf or NaN).
KVT_HOST_DEVICE uint16_t FloatToF16(float x, F16Round mode) {
  constexpr uint16_t kMaxMag = 0x7BFF;  // 65504
  const uint32_t bits = FloatBits(x);
  const bool neg = (bits >> 31) != 0;
  const float ax = BitsToFloat(bits & 0x7FFFFFFFu);
  uint16_t mag = float16_internal::F16NearestMagnitude(ax);
  if (mag > kMaxMag) mag = kMaxMag;
  const float got = F16ToFloat(mag);
  // Directed rounding: step one fp16 ulp of magnitude where the nearest went the wrong way. Rounding x down =
  // rounding |x| toward zero for x >= 0, away from zero for x < 0.
  const bool want_smaller_mag = (mode == F16Round::kDown && !neg) || (mode == F16Round::kUp && neg);
  const bool want_larger_mag = (mode == F16Round::kDown && neg) || (mode == F16Round::kUp && !neg);
  if (want_smaller_mag && got > ax && mag > 0) --mag;
  if (want_larger_mag && got < ax && mag < kMaxMag) ++mag;
  return static_cast<uint16_t>((neg ? 0x8000 : 0) | mag);
}

// bf16 bits -> float (exact).
KVT_HOST_DEVICE float Bf16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// Finite float -> bf16 bits, round to nearest even, saturating to +-max finite bf16 (0x7F7F) instead of inf.
KVT_HOST_DEVICE uint16_t FloatToBf16(float x) {
  const uint32_t b = FloatBits(x);
  uint32_t rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16;
  if ((rounded & 0x7F80) == 0x7F80) rounded = (rounded & 0x8000) | 0x7F7F;  // would be inf: saturate
  return static_cast<uint16_t>(rounded);
}

}  // namespace kvt::numerics

#endif  // KVT_NUMERICS_FLOAT16_H_
