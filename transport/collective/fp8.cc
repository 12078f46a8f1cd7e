#include "transport/collective/fp8.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"

namespace kvt::collective {
namespace {

uint32_t BitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

absl::Status CheckGroupSize(int group_size) {
  if (group_size < 1 || group_size > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrFormat("FP8 group_size must be 1..65536, got %d", group_size));
  }
  return absl::OkStatus();
}

}  // namespace

uint8_t EncodeFp8E4m3(float x) {
  const uint32_t bits = BitsOf(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7f;  // NaN
  const float a = std::fabs(x);
  if (a >= kFp8E4m3Max) return sign | 0x7e;  // saturate, infinities included
  if (a < 0x1p-6f) {
    // Subnormal range: units of 2^-9. a * 2^9 is exact; 8 units rounds up into the smallest normal, whose
    // code (exponent 1, mantissa 0) is 8 as well.
    const float units = a * 512.0f;
    float q = std::floor(units);
    const float frac = units - q;
    if (frac > 0.5f || (frac == 0.5f && std::fmod(q, 2.0f) != 0.0f)) q += 1.0f;
    return sign | static_cast<uint8_t>(q);
  }
  // Normal: keep 3 of fp32's 23 mantissa bits, rounding half to even on the dropped 20; a carry moves into
  // the exponent. a < 448 keeps the result at or below 448 (0x7e), since 448 < a < 464 rounds down.
  const uint32_t rounded = (magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20;
  const uint32_t exponent = (rounded >> 3) - 127 + 7;
  return sign | static_cast<uint8_t>((exponent << 3) | (rounded & 7u));
}

float DecodeFp8E4m3(uint8_t code) {
  const int exponent = (code >> 3) & 0xf;
  const int mantissa = code & 7;
  float value;
  if (exponent == 0xf && mantissa == 7) {
    value = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    value = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  }
  return (code & 0x80) ? -value : value;
}

size_t Fp8GroupPackedSize(size_t n, int group_size) {
  const size_t groups = (n + group_size - 1) / group_size;
  return groups * sizeof(float) + n;
}

absl::Status Fp8GroupQuantize(absl::Span<const float> in, int group_size, absl::Span<uint8_t> out) {
  if (absl::Status s = CheckGroupSize(group_size); !s.ok()) return s;
  if (out.size() != Fp8GroupPackedSize(in.size(), group_size)) {
    return absl::InvalidArgumentError(absl::StrFormat("FP8 output has %d bytes, %d values need %d",
                                                      out.size(), in.size(),
                                                      Fp8GroupPackedSize(in.size(), group_size)));
  }
  const size_t groups = (in.size() + group_size - 1) / group_size;
  uint8_t* codes = out.data() + groups * sizeof(float);
  for (size_t g = 0; g < groups; ++g) {
    const size_t begin = g * group_size;
    const size_t end = std::min(in.size(), begin + group_size);
    float amax = 0.0f;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(in[i])) {
        return absl::InvalidArgumentError(absl::StrFormat("FP8 input %d is %f", i, in[i]));
      }
      amax = std::max(amax, std::fabs(in[i]));
    }
    float scale = amax / kFp8E4m3Max;
    if (amax > 0.0f && scale == 0.0f) scale = std::numeric_limits<float>::denorm_min();
    // The division can round down (far down for a subnormal scale); step the scale up until the largest value
    // fits, so that saturation never cuts a value of the group. Up means toward +infinity: stepping toward 1
    // (as this once did) moves a scale above 1 down and never ends, e.g. for max|x| = 448.039062.
    while (amax > 0.0f && amax / scale > kFp8E4m3Max) {
      scale = std::nextafter(scale, std::numeric_limits<float>::infinity());
    }
    std::memcpy(out.data() + g * sizeof(float), &scale, sizeof(scale));
    for (size_t i = begin; i < end; ++i) codes[i] = scale == 0.0f ? 0 : EncodeFp8E4m3(in[i] / scale);
  }
  return absl::OkStatus();
}

absl::Status Fp8GroupDequantize(absl::Span<const uint8_t> in, int group_size, absl::Span<float> out) {
  if (absl::Status s = CheckGroupSize(group_size); !s.ok()) return s;
  if (in.size() != Fp8GroupPackedSize(out.size(), group_size)) {
    return absl::InvalidArgumentError(absl::StrFormat("FP8 input has %d bytes, %d values need %d", in.size(),
                                                      out.size(),
                                                      Fp8GroupPackedSize(out.size(), group_size)));
  }
  const size_t groups = (out.size() + group_size - 1) / group_size;
  const uint8_t* codes = in.data() + groups * sizeof(float);
  for (size_t g = 0; g < groups; ++g) {
    float scale;
    std::memcpy(&scale, in.data() + g * sizeof(float), sizeof(scale));
    const size_t end = std::min(out.size(), (g + 1) * group_size);
    for (size_t i = g * group_size; i < end; ++i) out[i] = DecodeFp8E4m3(codes[i]) * scale;
  }
  return absl::OkStatus();
}

}  // namespace kvt::collective
