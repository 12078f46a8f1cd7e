// The claim behind the GPU decoders' EndPairFromIndex (codec/gpu/codec_kernels_common.cuh): for every valid 23-bit
// end pair index i, the f32 guess h = (int)((x * rsqrt(x) - 1) * 0.5), x = 8 i + 1, lies within one of the true
// h = max{h : h (h + 1) / 2 <= i}, so one step down and one step up correct it exactly. The device's
// rsqrt.approx.f32 is documented to within 2^-22.9 relative; this checks every index with the reciprocal square root
// off by up to 2^-19 either way. Host-only: it needs no GPU.
#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"

namespace {

constexpr int kEndGridMax = 4094;
constexpr int kMaxEndPairIndex = kEndGridMax * (kEndGridMax + 1) / 2 + kEndGridMax;

// The kernel's guess and its two steps, every f32 operation rounded on its own as on the GPU (--fmad=false).
int GuessAndStep(int i, double rsqrt_error) {
  volatile float x = 8.0f * static_cast<float>(i) + 1.0f;
  volatile float r = static_cast<float>((1.0 / std::sqrt(static_cast<double>(x))) * (1.0 + rsqrt_error));
  volatile float s = x * r;
  volatile float t = s - 1.0f;
  volatile float u = t * 0.5f;
  int h = static_cast<int>(u);
  h = h < 0 ? 0 : (h > kEndGridMax ? kEndGridMax : h);
  h -= h * (h + 1) / 2 > i ? 1 : 0;
  h += (h + 1) * (h + 2) / 2 <= i ? 1 : 0;
  return h;
}

TEST(EndPairGuessTest, OneStepEachWayRecoversEveryIndexEvenWithAnRsqrtFarWorseThanTheDevices) {
  for (double error : {-0x1p-19, -0x1p-21, 0.0, 0x1p-21, 0x1p-19}) {
    int h = 0, misses = 0;
    for (int i = 0; i <= kMaxEndPairIndex; ++i) {
      while ((h + 1) * (h + 2) / 2 <= i) ++h;  // the true h, non-decreasing in i
      const int got = GuessAndStep(i, error);
      if (got != h && misses++ < 5) ADD_FAILURE() << "index " << i << ", rsqrt error " << error << ": " << got << " != " << h;
    }
    EXPECT_EQ(misses, 0) << "rsqrt error " << error;
  }
}

// The step logic itself fails when the guess is two off: the test above would catch a worse guess.
TEST(EndPairGuessTest, AGuessTwoOffIsNotRecovered) {
  const int i = 5000 * 4001 / 2 % kMaxEndPairIndex;
  int h = 0;
  while ((h + 1) * (h + 2) / 2 <= i) ++h;
  int g = h + 2;
  g -= g * (g + 1) / 2 > i ? 1 : 0;
  g += (g + 1) * (g + 2) / 2 <= i ? 1 : 0;
  EXPECT_NE(g, h);
}

}  // namespace
