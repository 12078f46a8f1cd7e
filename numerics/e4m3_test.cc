#include "numerics/e4m3.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

// The one E4M3 conversion (numerics/e4m3.h), on the host. The kernels compile the same header; their tests
// (codec/gpu, collective) compare their bytes with the host paths that call it.
namespace kvt::numerics {
namespace {

struct Known {
  float value;
  uint8_t code;
};

// Hand-derived from the E4M3FN definition (bias 7, 3 mantissa bits, max 448, subnormal unit 2^-9).
const Known kKnown[] = {
    {0.0f, 0x00},
    {-0.0f, 0x80},
    {1.0f, 0x38},
    {-1.0f, 0xb8},
    {1.0625f, 0x38},  // halfway between 1 and 1.125: ties to the even mantissa 0
    {1.1875f, 0x3a},  // halfway between 1.125 and 1.25: ties to the even mantissa 2
    {1.1f, 0x39},     // nearest is 1.125
    {1.9375f, 0x40},  // halfway between 1.875 and 2: the even one carries into the exponent
    {240.0f, 0x77},   // 1.875 * 2^7
    {256.0f, 0x78},   // 2^8
    {448.0f, 0x7e},   // the largest finite value
    {-448.0f, 0xfe},
    {449.0f, 0x7e},  // saturates
    {464.0f, 0x7e},  // halfway to the (absent) 480: saturates, never NaN
    {1e9f, 0x7e},
    {-1e9f, 0xfe},
    {std::numeric_limits<float>::infinity(), 0x7e},
    {-std::numeric_limits<float>::infinity(), 0xfe},
    {0x1p-6f, 0x08},     // the smallest normal
    {0x1p-9f, 0x01},     // the smallest subnormal
    {0x1p-10f, 0x00},    // halfway between 0 and 2^-9: ties to 0
    {0x1.8p-10f, 0x01},  // 0.75 * 2^-9 rounds up
    {0x1.8p-9f, 0x02},   // 1.5 units: ties to 2
    {0x1.4p-8f, 0x02},   // 2.5 units: ties to 2
    {0x1.cp-7f, 0x07},   // 7 units, the largest subnormal
    {0x1.ep-7f, 0x08},   // 7.5 units: ties to 8, which is the smallest normal
    {0x1.2p-6f, 0x09},   // 1.125 * 2^-6
    {1e-30f, 0x00},
    {std::numeric_limits<float>::denorm_min(), 0x00},
};

TEST(E4m3Test, EncodesKnownValuesRoundingToNearestEvenAndSaturating) {
  for (const Known& k : kKnown) {
    EXPECT_EQ(FloatToE4m3(k.value), k.code) << "value " << k.value;
  }
}

TEST(E4m3Test, NanEncodesAsNanAndNanCodesDecodeAsNan) {
  EXPECT_EQ(FloatToE4m3(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0xff)));
}

TEST(E4m3Test, NanKeepsItsSignBothWays) {
  EXPECT_EQ(FloatToE4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_TRUE(std::signbit(E4m3ToFloat(0xFF)));
  EXPECT_FALSE(std::signbit(E4m3ToFloat(0x7F)));
  for (int c = 0; c < 256; ++c) EXPECT_EQ(E4m3IsNan(c), std::isnan(E4m3ToFloat(c))) << "code " << c;
}

TEST(E4m3Test, DecodesKnownCodes) {
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(E4m3ToFloat(0x08), 0x1p-6f);
  EXPECT_EQ(E4m3ToFloat(0x3a), 1.25f);
  EXPECT_EQ(E4m3ToFloat(0xb8), -1.0f);
  EXPECT_TRUE(std::signbit(E4m3ToFloat(0x80)));
}

TEST(E4m3Test, EveryFiniteCodeSurvivesADecodeEncodeRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

// The slow way: the nearest code by distance, even mantissa on ties, saturating. The fast path must agree.
uint8_t NearestByDistance(float x) {
  if (std::fabs(x) >= 448.0f) return x < 0 ? 0xfe : 0x7e;
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 0x7f; ++c) {
    const double d = std::fabs(std::fabs(static_cast<double>(x)) - E4m3ToFloat(static_cast<uint8_t>(c)));
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) {
      best = c;
      best_distance = d;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(E4m3Test, EncodeAgreesWithANearestByDistanceSearchOnRandomAndMidpointValues) {
  std::mt19937 rng(7);
  std::vector<float> values;
  for (int c = 0; c + 1 < 0x7f; ++c) {  // every midpoint and its neighbours
    const float mid = (E4m3ToFloat(c) + E4m3ToFloat(c + 1)) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  std::uniform_real_distribution<float> exponent(-12.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) values.push_back((i % 2 ? -1 : 1) * std::exp2(exponent(rng)));
  for (float v : values) ASSERT_EQ(FloatToE4m3(v), NearestByDistance(v)) << "value " << v;
}

TEST(E4m3Test, E4m3MatchesItsDefinitionOnEveryCode) {
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

TEST(E4m3Test, E4m3RoundsToTheNearestCodeAndSaturates) {
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
}  // namespace kvt::numerics
