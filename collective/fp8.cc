#include "collective/fp8.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"
#include "numerics/e4m3.h"

namespace kvt::collective {
namespace {

absl::Status CheckGroupSize(int group_size) {
  if (group_size < 1 || group_size > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrFormat("FP8 group_size must be 1..65536, got %d", group_size));
  }
  return absl::OkStatus();
}

}  // namespace

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
    float scale = amax / numerics::kE4m3Max;
    if (amax > 0.0f && scale == 0.0f) scale = std::numeric_limits<float>::denorm_min();
    // The division can round down (far down for a subnormal scale); step the scale up until the largest value
    // fits, so that saturation never cuts a value of the group. Up means toward +infinity: stepping toward 1
    // (as this once did) moves a scale above 1 down and never ends, e.g. for max|x| = 448.039062.
    while (amax > 0.0f && amax / scale > numerics::kE4m3Max) {
      scale = std::nextafter(scale, std::numeric_limits<float>::infinity());
    }
    std::memcpy(out.data() + g * sizeof(float), &scale, sizeof(scale));
    for (size_t i = begin; i < end; ++i) codes[i] = scale == 0.0f ? 0 : numerics::FloatToE4m3(in[i] / scale);
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
    for (size_t i = g * group_size; i < end; ++i) out[i] = numerics::E4m3ToFloat(codes[i]) * scale;
  }
  return absl::OkStatus();
}

}  // namespace kvt::collective
