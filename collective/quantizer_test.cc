#include "collective/quantizer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::collective {
namespace {

// The stated bound for one value of a group: half the group's scale, plus fp32 rounding of the result.
// The scale is the group's range (without the spike, when reserving) over 2^bits - 1.
double GroupBound(absl::Span<const float> group, int bits, bool spike_reserve) {
  size_t spike = group.size();
  if (spike_reserve) {
    spike = 0;
    for (size_t i = 1; i < group.size(); ++i) {
      if (std::fabs(group[i]) > std::fabs(group[spike])) spike = i;
    }
  }
  double lo = 0, hi = 0, max_abs = 0;
  bool any = false;
  for (size_t i = 0; i < group.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(group[i])));
    if (i == spike) continue;
    lo = any ? std::min(lo, static_cast<double>(group[i])) : group[i];
    hi = any ? std::max(hi, static_cast<double>(group[i])) : group[i];
    any = true;
  }
  const double scale = (hi - lo) / ((1 << bits) - 1);
  return scale * (0.5 + kQuantizerCodeSlack) * (1 + 1e-6) + std::ldexp(max_abs, -23);
}

std::vector<float> RandomWithOutliers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.5f, 2.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) {
    v = normal(rng);
    if (uniform(rng) < 0.01f) v *= 100.0f;
  }
  return x;
}

std::vector<float> RoundTrip(const GroupQuantizer& q, absl::Span<const float> x) {
  std::vector<uint8_t> packed(q.PackedSize(x.size()));
  EXPECT_TRUE(q.Quantize(x, absl::MakeSpan(packed)).ok());
  std::vector<float> y(x.size());
  EXPECT_TRUE(q.Dequantize(packed, absl::MakeSpan(y)).ok());
  return y;
}

class QuantizerRoundTripTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(QuantizerRoundTripTest, ErrorIsAtMostHalfAScalePerValue) {
  const auto [bits, spike] = GetParam();
  for (int group_size : {1, 7, 128, 1000}) {
    auto q = GroupQuantizer::Create({.bits = bits, .group_size = group_size, .spike_reserve = spike});
    ASSERT_TRUE(q.ok());
    // 3000 values: a tail group for every group size but 1 and 1000... and 1000 divides it, so add one.
    const std::vector<float> x = RandomWithOutliers(3001, 17 * bits + spike);
    const std::vector<float> y = RoundTrip(*q, x);
    double worst = 0;  // largest error as a fraction of its bound
    for (size_t begin = 0; begin < x.size(); begin += group_size) {
      const size_t len = std::min<size_t>(group_size, x.size() - begin);
      const double bound = GroupBound(absl::MakeConstSpan(x).subspan(begin, len), bits, spike);
      for (size_t i = begin; i < begin + len; ++i) {
        const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
        ASSERT_LE(err, bound) << "bits " << bits << " group " << group_size << " index " << i;
        if (bound > 0) worst = std::max(worst, err / bound);
      }
    }
    // The bound is tight: rounding to the nearest code uses most of it somewhere.
    if (group_size > 1) {
      EXPECT_GT(worst, 0.5) << "bits " << bits << " group " << group_size;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryWidth, QuantizerRoundTripTest,
                         ::testing::Combine(::testing::Range(2, 9), ::testing::Bool()));

TEST(QuantizerTest, WidthsSplitIntoFourTwoAndOneBitPlanes) {
  const std::vector<std::vector<int>> expected = {{}, {}, {2}, {2, 1}, {4}, {4, 1}, {4, 2}, {4, 2, 1}, {8}};
  for (int bits = 2; bits <= 8; ++bits) {
    int planes[3];
    const int count = PlaneWidths(bits, planes);
    EXPECT_EQ(std::vector<int>(planes, planes + count), expected[bits]) << bits;
  }
}

TEST(QuantizerTest, PackedSizeCountsGroupHeadersAndPlanes) {
  auto q5 = GroupQuantizer::Create({.bits = 5, .group_size = 128});
  ASSERT_TRUE(q5.ok());
  EXPECT_EQ(q5->PackedSize(256), 2 * 8 + 128 + 32);
  EXPECT_EQ(q5->PackedSize(0), 0);
  EXPECT_EQ(q5->PackedSize(1), 8 + 1 + 1);
  auto q3 = GroupQuantizer::Create({.bits = 3, .group_size = 128});
  EXPECT_EQ(q3->PackedSize(256), 2 * 8 + 64 + 32);
  EXPECT_EQ(q3->PackedSize(129), 2 * 8 + 33 + 17);  // a tail group of one value
  auto q7 = GroupQuantizer::Create({.bits = 7, .group_size = 64, .spike_reserve = true});
  EXPECT_EQ(q7->PackedSize(640), 10 * 16 + 320 + 160 + 80);
  auto q8 = GroupQuantizer::Create({.bits = 8, .group_size = 128});
  EXPECT_EQ(q8->PackedSize(1000), 8 * 8 + 1000);
  // Every width costs exactly `bits` bits per value beside the headers.
  for (int bits = 2; bits <= 8; ++bits) {
    auto q = GroupQuantizer::Create({.bits = bits, .group_size = 128});
    EXPECT_EQ(q->PackedSize(1024), 8 * 8 + 1024 * bits / 8) << bits;
  }
}

TEST(QuantizerTest, FiveBitsPutHighFourBitsAndLowBitInSeparatePlanes) {
  // 0..31 over a group of 32: min 0, scale 1, so value i gets code i.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i);
  auto q = GroupQuantizer::Create({.bits = 5, .group_size = 32});
  ASSERT_TRUE(q.ok());
  std::vector<uint8_t> packed(q->PackedSize(32));
  ASSERT_EQ(packed.size(), 8 + 16 + 4);
  ASSERT_TRUE(q->Quantize(x, absl::MakeSpan(packed)).ok());
  float min, scale;
  std::memcpy(&min, &packed[0], 4);
  std::memcpy(&scale, &packed[4], 4);
  EXPECT_EQ(min, 0.0f);
  EXPECT_EQ(scale, 1.0f);
  for (int i = 0; i < 32; ++i) {
    const int high = (packed[8 + i / 2] >> (4 * (i % 2))) & 0xF;
    const int low = (packed[8 + 16 + i / 8] >> (i % 8)) & 1;
    EXPECT_EQ(high, i >> 1) << i;
    EXPECT_EQ(low, i & 1) << i;
  }
  std::vector<float> y(32);
  ASSERT_TRUE(q->Dequantize(packed, absl::MakeSpan(y)).ok());
  EXPECT_EQ(y, x);
}

TEST(QuantizerTest, TiesRoundToEven) {
  // min 0, max 3, two bits: scale 1, so 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
  const std::vector<float> x = {0.0f, 0.5f, 1.5f, 2.5f, 3.0f};
  auto q = GroupQuantizer::Create({.bits = 2, .group_size = 8});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(RoundTrip(*q, x), (std::vector<float>{0.0f, 0.0f, 2.0f, 2.0f, 3.0f}));
}

TEST(QuantizerTest, ConstantGroupRoundTripsExactly) {
  std::vector<float> x(300, -3.25f);
  x[200] = 7.0f;  // the second group is not constant; the first and third are
  for (bool spike : {false, true}) {
    auto q = GroupQuantizer::Create({.bits = 2, .group_size = 128, .spike_reserve = spike});
    ASSERT_TRUE(q.ok());
    const std::vector<float> y = RoundTrip(*q, x);
    for (size_t i = 0; i < 128; ++i) ASSERT_EQ(y[i], -3.25f) << i;
    for (size_t i = 256; i < 300; ++i) ASSERT_EQ(y[i], -3.25f) << i;
    // Two distinct values fit any width exactly; with spike reserving the 7 is the spike.
    for (size_t i = 128; i < 256; ++i) ASSERT_EQ(y[i], x[i]) << i;
  }
}

TEST(QuantizerTest, SpikeTravelsExactlyAndDoesNotWidenTheGroup) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  std::vector<float> x(128);
  for (float& v : x) v = small(rng);
  x[77] = -12345.678f;
  auto plain = GroupQuantizer::Create({.bits = 4, .group_size = 128});
  auto spiky = GroupQuantizer::Create({.bits = 4, .group_size = 128, .spike_reserve = true});
  const std::vector<float> y_plain = RoundTrip(*plain, x);
  const std::vector<float> y_spiky = RoundTrip(*spiky, x);
  EXPECT_EQ(y_spiky[77], x[77]);
  double plain_err = 0, spiky_err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 77) continue;
    plain_err = std::max(plain_err, std::fabs(static_cast<double>(y_plain[i]) - x[i]));
    spiky_err = std::max(spiky_err, std::fabs(static_cast<double>(y_spiky[i]) - x[i]));
  }
  EXPECT_LE(spiky_err, 2.0 / 15 / 2 + 1e-6);  // range at most 2, 15 steps
  EXPECT_GT(plain_err, 10 * spiky_err);  // without reserving, the outlier's range swallows the small values
}

TEST(QuantizerTest, NonFiniteInputIsRejectedWithInvalidArgument) {
  auto q = GroupQuantizer::Create({.bits = 4});
  ASSERT_TRUE(q.ok());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(200, 1.0f);
    x[150] = bad;
    std::vector<uint8_t> packed(q->PackedSize(x.size()));
    const absl::Status status = q->Quantize(x, absl::MakeSpan(packed));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("150"), absl::string_view::npos) << status;
  }
}

TEST(QuantizerTest, ExtremeFiniteRangeDoesNotOverflow) {
  const std::vector<float> x = {-std::numeric_limits<float>::max(), 0.0f, std::numeric_limits<float>::max()};
  auto q = GroupQuantizer::Create({.bits = 8, .group_size = 4});
  const std::vector<float> y = RoundTrip(*q, x);
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(y[0], x[0]);
  EXPECT_LE(std::fabs(static_cast<double>(y[1])), 2.0 * std::numeric_limits<float>::max() / 255 / 2 * 1.0001);
}

TEST(QuantizerTest, InvalidOptionsAndSizesAreRejected) {
  EXPECT_EQ(GroupQuantizer::Create({.bits = 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupQuantizer::Create({.bits = 9}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupQuantizer::Create({.bits = 4, .group_size = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto q = GroupQuantizer::Create({.bits = 4});
  ASSERT_TRUE(q.ok());
  std::vector<float> x(10, 1.0f);
  std::vector<uint8_t> packed(q->PackedSize(10) - 1);
  EXPECT_EQ(q->Quantize(x, absl::MakeSpan(packed)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q->Dequantize(packed, absl::MakeSpan(x)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantizerTest, CorruptSpikeIndexIsRejected) {
  auto q = GroupQuantizer::Create({.bits = 4, .group_size = 16, .spike_reserve = true});
  std::vector<float> x(20, 1.0f);
  std::vector<uint8_t> packed(q->PackedSize(x.size()));
  ASSERT_TRUE(q->Quantize(x, absl::MakeSpan(packed)).ok());
  const uint32_t bad = 4;  // the tail group holds 4 values
  std::memcpy(&packed[16 + 12], &bad, 4);
  EXPECT_EQ(q->Dequantize(packed, absl::MakeSpan(x)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::collective
