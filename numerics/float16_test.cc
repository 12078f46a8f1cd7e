#include "numerics/float16.h"

#include <cmath>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace kvt::numerics {
namespace {

TEST(Float16Test, EveryFiniteF16RoundTripsExactlyInEveryMode) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1F) == 0x1F) continue;
    const float x = F16ToFloat(static_cast<uint16_t>(h));
    for (F16Round mode : {F16Round::kNearestEven, F16Round::kDown, F16Round::kUp}) {
      const uint16_t back = FloatToF16(x, mode);
      ASSERT_EQ(F16ToFloat(back), x) << std::hex << h;
    }
  }
}

TEST(Float16Test, DirectedF16RoundingBracketsTheValueAndSaturates) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = u(rng) * (i % 3 == 0 ? 1e-6f : 1.0f);
    const float down = F16ToFloat(FloatToF16(x, F16Round::kDown));
    const float up = F16ToFloat(FloatToF16(x, F16Round::kUp));
    const float nearest = F16ToFloat(FloatToF16(x, F16Round::kNearestEven));
    ASSERT_TRUE(std::isfinite(down) && std::isfinite(up) && std::isfinite(nearest));
    if (std::fabs(x) <= 65504.0f) {
      ASSERT_LE(down, x);
      ASSERT_GE(up, x);
      ASSERT_TRUE(nearest == down || nearest == up);
    }
  }
  EXPECT_EQ(F16ToFloat(FloatToF16(1e30f, F16Round::kUp)), 65504.0f);
  EXPECT_EQ(F16ToFloat(FloatToF16(-1e30f, F16Round::kDown)), -65504.0f);
  EXPECT_EQ(F16ToFloat(FloatToF16(1.0f + 1.0f / 4096, F16Round::kNearestEven)), 1.0f);  // tie to even
}

TEST(Float16Test, Bf16RoundsToNearestEvenAndSaturatesInsteadOfOverflowing) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), FloatToBf16(1.0f));          // tie -> even
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), FloatToBf16(1.0f + 1.0f / 64));  // tie -> even (up)
  const float max = std::numeric_limits<float>::max();
  EXPECT_TRUE(std::isfinite(Bf16ToFloat(FloatToBf16(max))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-max)), -Bf16ToFloat(0x7F7F));
}

}  // namespace
}  // namespace kvt::numerics
