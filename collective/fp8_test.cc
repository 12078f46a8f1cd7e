#include "collective/fp8.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "numerics/e4m3.h"

namespace kvt::collective {
namespace {

TEST(Fp8Test, GroupRoundTripStaysWithinTheStatedBound) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int group : {1, 7, 128}) {
    std::vector<float> x(1000);
    for (float& v : x) v = normal(rng);
    x[500] = 3e4f;   // an outlier
    x[10] = 1e-30f;  // tiny values in the same group as normal ones
    std::vector<uint8_t> packed(Fp8GroupPackedSize(x.size(), group));
    ASSERT_TRUE(Fp8GroupQuantize(x, group, absl::MakeSpan(packed)).ok());
    std::vector<float> y(x.size());
    ASSERT_TRUE(Fp8GroupDequantize(packed, group, absl::MakeSpan(y)).ok());
    for (size_t g = 0; g < x.size(); g += group) {
      float amax = 0;
      for (size_t i = g; i < std::min(x.size(), g + group); ++i) amax = std::max(amax, std::fabs(x[i]));
      const double scale = amax / 448.0 * (1 + std::ldexp(1.0, -22));
      for (size_t i = g; i < std::min(x.size(), g + group); ++i) {
        const double a = std::fabs(x[i]);
        const double bound = std::ldexp(a, -4) + std::ldexp(scale, -10) + std::ldexp(a + scale, -21);
        ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), bound) << "group " << group << " value " << i;
      }
    }
  }
}

TEST(Fp8Test, ZerosAndTinyGroupsComeBackWithoutOverflow) {
  const std::vector<float> x = {0.0f, 0.0f, std::numeric_limits<float>::denorm_min(), 3e-45f, -1e-44f};
  std::vector<uint8_t> packed(Fp8GroupPackedSize(x.size(), 2));
  ASSERT_TRUE(Fp8GroupQuantize(x, 2, absl::MakeSpan(packed)).ok());
  std::vector<float> y(x.size());
  ASSERT_TRUE(Fp8GroupDequantize(packed, 2, absl::MakeSpan(y)).ok());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  for (size_t i = 2; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], std::fabs(x[i]) / 8) << i;
}

// fp32(448.039062 / 448) rounds down, so 448.039062 / scale > 448: the scale must step up. Stepping toward 1
// (the first version) moved this scale above 1 down forever and hung Dispatch on both backends.
TEST(Fp8Test, AScaleAboveOneThatRoundedDownStepsUpAndTheGroupFits) {
  const float amax = 0x1.c00ap+8f;  // 448.039062
  ASSERT_GT(amax / (amax / numerics::kE4m3Max), numerics::kE4m3Max) << "the case this test needs";
  const std::vector<float> x = {amax, -1.0f, 0.5f, -amax};
  std::vector<uint8_t> packed(Fp8GroupPackedSize(x.size(), 4));
  ASSERT_TRUE(Fp8GroupQuantize(x, 4, absl::MakeSpan(packed)).ok());
  float scale;
  std::memcpy(&scale, packed.data(), sizeof(scale));
  EXPECT_GT(scale, amax / numerics::kE4m3Max);
  EXPECT_LE(amax / scale, numerics::kE4m3Max);
  std::vector<float> y(x.size());
  ASSERT_TRUE(Fp8GroupDequantize(packed, 4, absl::MakeSpan(y)).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], std::fabs(x[i]) / 16 + scale) << i;
}

TEST(Fp8Test, NonFiniteInputsAndWrongSizesAreRejected) {
  std::vector<float> x = {1.0f, std::numeric_limits<float>::infinity()};
  std::vector<uint8_t> packed(Fp8GroupPackedSize(2, 128));
  const absl::Status inf = Fp8GroupQuantize(x, 128, absl::MakeSpan(packed));
  EXPECT_EQ(inf.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(inf.message().find("input 1"), absl::string_view::npos) << inf;
  x[1] = std::nanf("");
  EXPECT_EQ(Fp8GroupQuantize(x, 128, absl::MakeSpan(packed)).code(), absl::StatusCode::kInvalidArgument);
  x[1] = 0;
  EXPECT_EQ(Fp8GroupQuantize(x, 128, absl::MakeSpan(packed).subspan(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Fp8GroupQuantize(x, 0, absl::MakeSpan(packed)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> y(3);
  EXPECT_EQ(Fp8GroupDequantize(packed, 128, absl::MakeSpan(y)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::collective
