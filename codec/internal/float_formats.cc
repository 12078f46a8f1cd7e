#include "codec/internal/float_formats.h"

#include <cmath>
#include <cstring>

namespace kvt::codec::internal {

uint32_t FloatBits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float BitsToFloat(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

float F16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7F800000u | (mant << 13));
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

namespace {

// Round-to-nearest-even float -> fp16 magnitude bits for finite |x|, without saturation (may give 0x7C00).
uint16_t F16NearestMagnitude(float ax) {
  uint32_t b = FloatBits(ax);
  int32_t exp = static_cast<int32_t>(b >> 23) - 127;
  if (exp < -25) return 0;  // below half the smallest subnormal (2^-25): rounds to 0
  if (exp < -14) {
    // Subnormal range: value / 2^-24, rounded to nearest even (exact in float arithmetic: a power-of-2 scale).
    float q = std::nearbyint(std::ldexp(ax, 24));
    return static_cast<uint16_t>(q);  // 1024 becomes the smallest normal, which is the right encoding
  }
  if (exp > 15) return 0x7C00;
  uint32_t mant = b & 0x7FFFFF;
  uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carries into the exponent correctly
  return static_cast<uint16_t>(h);
}

}  // namespace

uint16_t FloatToF16(float x, F16Round mode) {
  constexpr uint16_t kMaxMag = 0x7BFF;  // 65504
  bool neg = std::signbit(x);
  float ax = std::fabs(x);
  uint16_t mag = F16NearestMagnitude(ax);
  if (mag > kMaxMag) mag = kMaxMag;
  float got = F16ToFloat(mag);
  // Directed rounding: step one fp16 ulp of magnitude where the nearest went the wrong way.
  // Rounding x down = rounding |x| toward zero for x >= 0, away from zero for x < 0.
  bool want_smaller_mag = (mode == F16Round::kDown && !neg) || (mode == F16Round::kUp && neg);
  bool want_larger_mag = (mode == F16Round::kDown && neg) || (mode == F16Round::kUp && !neg);
  if (want_smaller_mag && got > ax && mag > 0) --mag;
  if (want_larger_mag && got < ax && mag < kMaxMag) ++mag;
  return static_cast<uint16_t>((neg ? 0x8000 : 0) | mag);
}

float Bf16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBf16(float x) {
  uint32_t b = FloatBits(x);
  uint32_t rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16;
  if ((rounded & 0x7F80) == 0x7F80) rounded = (rounded & 0x8000) | 0x7F7F;  // would be inf: saturate
  return static_cast<uint16_t>(rounded);
}

float E4m3ToFloat(uint8_t code) {
  if (E4m3IsNan(code)) return std::nanf("");
  uint32_t exp = (code >> 3) & 0xF;
  uint32_t mant = code & 7;
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                     : std::ldexp(static_cast<float>(8 + mant), static_cast<int>(exp) - 10);
  return (code & 0x80) ? -v : v;
}

uint8_t FloatToE4m3(float x) {
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float ax = std::fabs(x);
  if (!(ax < 448.0f)) return sign | 0x7E;  // saturate (also catches rounding near the top below)
  uint8_t mag;
  if (ax < 0.015625f) {  // below 2^-6: subnormal step 2^-9, exact scaling then round to nearest even
    mag = static_cast<uint8_t>(std::nearbyint(ax * 512.0f));  // 8 = the smallest normal's code, correctly
  } else {
    uint32_t b = FloatBits(ax);
    uint32_t r = (b + 0x7FFFF + ((b >> 20) & 1)) >> 20;  // float exponent:mantissa rounded to 3 mantissa bits
    uint32_t m = r - (120u << 3);                        // rebias exponent 127 -> 7
    mag = m > 0x7E ? 0x7E : static_cast<uint8_t>(m);
  }
  return sign | mag;
}

}  // namespace kvt::codec::internal
