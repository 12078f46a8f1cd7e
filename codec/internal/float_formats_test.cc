#include "codec/internal/float_formats.h"

#include <cmath>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace kvt::codec::internal {
namespace {

TEST(FloatFormatsTest, EveryFiniteF16RoundTripsExactlyInEveryMode) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1F) == 0x1F) continue;
    const float x = F16ToFloat(static_cast<uint16_t>(h));
    for (F16Round mode : {F16Round::kNearestEven, F16Round::kDown, F16Round::kUp}) {
      const uint16_t back = FloatToF16(x, mode);
      ASSERT_EQ(F16ToFloat(back), x) << std::hex << h;
    }
  }
}

TEST(FloatFormatsTest, DirectedF16RoundingBracketsTheValueAndSaturates) {
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

TEST(FloatFormatsTest, Bf16RoundsToNearestEvenAndSaturatesInsteadOfOverflowing) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), FloatToBf16(1.0f));          // tie -> even
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), FloatToBf16(1.0f + 1.0f / 64));  // tie -> even (up)
  const float max = std::numeric_limits<float>::max();
  EXPECT_TRUE(std::isfinite(Bf16ToFloat(FloatToBf16(max))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-max)), -Bf16ToFloat(0x7F7F));
}

TEST(FloatFormatsTest, E4m3MatchesItsDefinitionOnEveryCode) {
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7F)));
  for (int code = 0; code < 256; ++code) {
    if (E4m3IsNan(code)) continue;
    const float v = E4m3ToFloat(code);
    const uint8_t back = FloatToE4m3(v);
    EXPECT_EQ(E4m3ToFloat(back), v) << code;
  }
}

TEST(FloatFormatsTest, E4m3RoundsToTheNearestCodeAndSaturates) {
  std::vector<float> values;
  for (int code = 0; code < 0x7F; ++code) values.push_back(E4m3ToFloat(code));
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(0.0f, 460.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = i % 2 ? u(rng) : u(rng) / 1000.0f;
    const float got = E4m3ToFloat(FloatToE4m3(x));
    float best = values[0];
    for (float v : values) {
      if (std::fabs(v - x) < std::fabs(best - x)) best = v;
    }
    ASSERT_EQ(std::fabs(got - x), std::fabs(best - x)) << x;
    ASSERT_EQ(E4m3ToFloat(FloatToE4m3(-x)), -got);
  }
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1e30f)), 448.0f);
}

}  // namespace
}  // namespace kvt::codec::internal
