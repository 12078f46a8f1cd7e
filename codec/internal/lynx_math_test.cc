#include "codec/internal/lynx_math.h"

#include <cmath>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace kvt::codec::internal {
namespace {

// The bucketed fast path of the vectorized encoders, written out in scalar form.
int BucketedCode(const LynxTables& t, float a) {
  const int j = static_cast<int>(a * static_cast<float>(t.bucket_count));
  int code = t.bucket_base[j];
  const int base = code;
  for (int i = 1; i <= t.corrections; ++i) code += a >= t.padded_thresholds[base + i] ? 1 : 0;
  return code;
}

TEST(LynxMathTest, ThresholdCodeMatchesTheRoundedLogCurveAwayFromTies) {
  for (float alpha : {0.5f, 4.0f, 32.0f}) {
    const auto t = GetLynxTables(alpha, 8);
    std::mt19937 rng(1);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int i = 0; i < 100000; ++i) {
      const float a = static_cast<float>(u(rng));
      const double y = std::log1p(alpha * double{a}) / std::log1p(double{alpha}) * 127;
      if (std::fabs(y - std::floor(y) - 0.5) < 1e-3) continue;  // float thresholds may differ right at a tie
      ASSERT_EQ(MagnitudeCode(*t, a), static_cast<int>(std::lround(y))) << alpha << " " << a;
    }
  }
}

TEST(LynxMathTest, BucketedFastPathEqualsTheThresholdCountEverywhere) {
  for (float alpha : {1e-3f, 0.5f, 4.0f, 60.0f, 1e4f}) {
    for (int bits : {2, 4, 5, 8}) {
      const auto t = GetLynxTables(alpha, bits);
      std::vector<float> probes = {0.0f, 1.0f, std::numeric_limits<float>::denorm_min()};
      for (int k = 1; k <= t->max_code; ++k) {
        probes.push_back(t->thresholds[k]);
        probes.push_back(std::nextafter(t->thresholds[k], 0.0f));
        probes.push_back(std::nextafter(t->thresholds[k], 2.0f));
      }
      for (int j = 0; j <= t->bucket_count; ++j) {
        const float edge = static_cast<float>(j) / t->bucket_count;
        probes.push_back(edge);
        probes.push_back(std::nextafter(edge, 0.0f));
      }
      std::mt19937 rng(bits);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (int i = 0; i < 20000; ++i) probes.push_back(u(rng));
      for (float a : probes) {
        if (a < 0.0f || a > 1.0f) continue;
        ASSERT_EQ(BucketedCode(*t, a), MagnitudeCode(*t, a)) << alpha << " " << bits << " " << a;
      }
    }
  }
}

TEST(LynxMathTest, LogGuessIsVerifiedForTheAlphaRangeAndEveryWidth) {
  for (float alpha : {1e-3f, 0.1f, 1.0f, 4.0f, 60.0f, 1e3f, 1e4f}) {
    for (int bits = 2; bits <= 8; ++bits) {
      const auto t = GetLynxTables(alpha, bits);
      EXPECT_TRUE(t->log_guess_ok) << alpha << " " << bits;
      // The corrected guess is the code wherever it was verified.
      std::mt19937 rng(bits);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (int i = 0; i < 5000; ++i) {
        const float a = u(rng);
        int f = std::min(std::max(static_cast<int>(std::floor(LogGuess(*t, a))), 0), t->max_code);
        f += a >= t->guess_high[f] ? 1 : 0;
        ASSERT_EQ(f, MagnitudeCode(*t, a)) << alpha << " " << bits << " " << a;
      }
    }
  }
}

TEST(LynxMathTest, DecodeTablesPlaceEachPrefixInsideItsInterval) {
  const auto t = GetLynxTables(4.0f, 8);
  for (AnchorRule rule : {AnchorRule::kCodeCentre, AnchorRule::kValueCentre}) {
    EXPECT_EQ(t->decode_table(8, rule)[127], t->full_values[127]);
    EXPECT_EQ(t->decode_table(8, rule)[128 + 5], -t->full_values[5]);
    for (int known = 1; known < 8; ++known) {
      const int unknown = 8 - known;
      const std::vector<float>& table = t->decode_table(known, rule);
      for (int p = 0; p < (1 << known); ++p) {
        const int h = p & ((1 << (known - 1)) - 1);
        const float v = std::fabs(table[p]);
        EXPECT_GE(v, t->full_values[h << unknown]);
        EXPECT_LE(v, t->full_values[((h + 1) << unknown) - 1]);
        EXPECT_EQ(std::signbit(table[p]), (p >> (known - 1)) == 1);
      }
    }
  }
}

TEST(LynxMathTest, MetadataQuantizersCoverTheChunkWithTheStoredValues) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1000.0f, 1000.0f);
  for (int i = 0; i < 20000; ++i) {
    float lo = u(rng), hi = u(rng);
    if (lo > hi) std::swap(lo, hi);
    const ChannelFrame f = MakeChannelFrame(lo, hi);
    std::uniform_real_distribution<float> in(lo, hi);
    float cmin = in(rng), cmax = in(rng);
    if (cmin > cmax) std::swap(cmin, cmax);
    const float centre = 0.5f * cmin + 0.5f * cmax;
    const int qm = QuantizeMu(f, centre);
    ASSERT_GE(qm, 0);
    ASSERT_LE(qm, 254);
    const float mu = ChunkMu(f, qm);
    const float need = std::fmax(cmax - mu, mu - cmin);
    const int qs = QuantizeSigma(f, need);
    const float sigma = ChunkSigma(f, qs);
    ASSERT_GE(sigma, need);
    // Smallest such sigma (unless capped at the full half-range).
    if (qs > 1) ASSERT_LT(ChunkSigma(f, qs - 1), need);
    // The stored centre is the nearest grid point to the target.
    ASSERT_LE(std::fabs(mu - centre), (hi - lo) / 254.0f * 1.001f + 1e-4f);
  }
}

TEST(LynxMathTest, SigmaCoversAChunkWhateverItsCentre) {
  // The worst case: mu at one end of the channel's range, values at the other (mean centering can do this).
  const ChannelFrame f = MakeChannelFrame(-3.0f, 7.0f);
  for (float mu : {-3.0f, 7.0f, 2.0f}) {
    const float need = std::fmax(7.0f - mu, mu + 3.0f);
    EXPECT_GE(ChunkSigma(f, QuantizeSigma(f, need)), need) << mu;
  }
  EXPECT_EQ(SigmaScaleTable()[255], 2.0f);
  EXPECT_EQ(SigmaScaleTable()[239], 1.0f);
}

TEST(LynxMathTest, SigmaScaleMatchesTheConstantsOfFormatMd) {
  const auto& s = SigmaScaleTable();
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[255], 0x1p+1f);
  EXPECT_EQ(s[254], 0x1.ea4afap+0f);
  EXPECT_EQ(s[248], 0x1.7a1148p+0f);   // (255 - 248) = 7 -> frac[7] * 2
  EXPECT_EQ(s[240], 0x1.0b5586p+0f);   // frac[15]
  EXPECT_EQ(s[239], 0x1p+0f);
  EXPECT_EQ(s[1], 0x1.172b84p-15f);    // (255 - 1) = 254 = 16 * 15 + 14 -> frac[14] * 2^(1 - 15)
}

TEST(LynxMathTest, HugeRangesGiveFiniteFrames) {
  const float max = std::numeric_limits<float>::max();
  const ChannelFrame f = MakeChannelFrame(-max, max);
  EXPECT_TRUE(std::isfinite(f.half));
  EXPECT_EQ(f.centre, 0.0f);
  for (int q = 0; q < 256; ++q) {
    EXPECT_TRUE(std::isfinite(ChunkMu(f, q)));
    EXPECT_TRUE(std::isfinite(ChunkSigma(f, q)));
  }
  EXPECT_EQ(FinalValue(max, -max, InverseSigma(f.half)), 1.0f);  // (x - mu) overflows to inf, clamps to 1
  EXPECT_EQ(FinalValue(5.0f, 5.0f, 0.0f), 0.0f);   // flat chunk
}

}  // namespace
}  // namespace kvt::codec::internal
