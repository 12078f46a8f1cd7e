#include "codec/internal/lynx_math.h"
#include "codec/scheme.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::codec::internal {
using ::kvt::codec::kMaxEndPairBits;
using ::kvt::codec::kMinEndPairBits;
namespace {

// The bucketed fast path of the vectorized encoders, written out in scalar form.
int BucketedCode(const LynxTables& t, float a) {
  const int j = static_cast<int>(a * static_cast<float>(t.bucket_count));
  int code = t.bucket_base[j];
  const int base = code;
  for (int i = 1; i <= t.corrections; ++i) code += a >= t.padded_thresholds[base + i] ? 1 : 0;
  return code;
}

// The first pages of a new alpha reach a daemon's workers at once: they must share one build, not each make
// (and slow one another down with) a copy.
TEST(LynxMathTest, ConcurrentFirstCallsForAnAlphaShareOneBuild) {
  for (const float alpha : {0.37f, 2.5f}) {
    std::vector<std::shared_ptr<const LynxTables>> got(8);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = GetLynxTables(alpha, 0.0f, 8); });
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NE(got[i], nullptr);
      EXPECT_EQ(got[i].get(), got[0].get()) << "alpha " << alpha << ", thread " << i;
    }
    EXPECT_EQ(GetLynxTables(alpha, 0.0f, 8).get(), got[0].get());
    EXPECT_EQ(got[0]->alpha, alpha);
    EXPECT_NE(GetLynxTables(alpha, 0.0f, 4).get(), got[0].get());  // another width, other tables
  }
}

TEST(LynxMathTest, ThresholdCodeMatchesTheRoundedLogCurveAwayFromTies) {
  for (float alpha : {0.5f, 4.0f, 32.0f}) {
    const auto t = GetLynxTables(alpha, 0.0f, 8);
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
    const std::pair<int, float> curves[] = {{2, 0.0f}, {4, 0.0f}, {5, 0.0f}, {8, 0.0f}, {8, CodecOptions{}.top_width}};
    for (const auto& [bits, width] : curves) {
      const auto t = GetLynxTables(alpha, width, bits);
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
        ASSERT_EQ(BucketedCode(*t, a), MagnitudeCode(*t, a)) << alpha << " " << bits << " " << width << " " << a;
      }
    }
  }
}

TEST(LynxMathTest, LogGuessIsVerifiedForTheAlphaRangeAndEveryWidth) {
  for (float alpha : {1e-3f, 0.1f, 1.0f, 4.0f, 60.0f, 1e3f, 1e4f}) {
    for (int bits = 2; bits <= 8; ++bits) {
      const auto t = GetLynxTables(alpha, 0.0f, bits);
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

TEST(LynxMathTest, PolyGuessIsVerifiedForGentleCurvesAndGivesTheCode) {
  // The default alpha must take the polynomial path (the AVX-512 VBMI encoder's fast guess).
  for (float alpha : {1e-3f, 0.1f, 0.5f, 1.0f}) {
    for (int bits = 2; bits <= 8; ++bits) {
      const auto t = GetLynxTables(alpha, 0.0f, bits);
      EXPECT_TRUE(t->poly_guess_ok) << alpha << " " << bits;
      std::mt19937 rng(bits);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (int i = 0; i < 5000; ++i) {
        const float a = i == 0 ? 1.0f : u(rng);
        int f = std::min(static_cast<int>(PolyGuess(*t, a)), t->max_code);
        f += a >= t->guess_high[f] ? 1 : 0;
        ASSERT_EQ(f, MagnitudeCode(*t, a)) << alpha << " " << bits << " " << a;
      }
    }
  }
  // A steep curve is not a cubic: the encoder keeps the log guess there.
  EXPECT_FALSE(GetLynxTables(1e4f, 0.0f, 8)->poly_guess_ok);
}

TEST(LynxMathTest, TheKneeSpansTheTopEighthLinearlyAndKeepsTheFastGuesses) {
  for (float alpha : {1e-3f, 0.1f, 0.5f, 1.0f, 4.0f, 60.0f, 1e4f}) {
    for (float w : {kMinTopWidth, 0.05f, 0.11f, kMaxTopWidth}) {
      const auto t = GetLynxTables(alpha, w, 8);
      EXPECT_EQ(t->top_width, w);
      // The anchor's outermost cell, codes 112..127, is [1 - w, 1], its thresholds evenly spaced.
      EXPECT_EQ(t->thresholds[112], static_cast<float>(1.0 - double{w})) << alpha << " " << w;
      EXPECT_EQ(t->full_values[127], 1.0f);
      for (int k = 113; k <= 127; ++k) {
        EXPECT_NEAR(t->thresholds[k] - t->thresholds[k - 1], w / 15.5, 1e-6) << alpha << " " << w << " " << k;
      }
      for (int k = 2; k <= 127; ++k) ASSERT_GT(t->thresholds[k], t->thresholds[k - 1]) << alpha << " " << w;
      // Below the knee, the plain curve scaled by (1 - w) / V0(111.5): the same shape.
      const auto plain = GetLynxTables(alpha, 0.0f, 8);
      const double scale = (1.0 - double{w}) / double{plain->thresholds[112]};
      for (int k = 1; k < 112; ++k) {
        EXPECT_NEAR(t->thresholds[k], plain->thresholds[k] * scale, 2e-6 * (1.0 + 1e-3 * alpha)) << alpha << " " << k;
      }
      // The log guess, with the knee's line, is verified at every alpha; the cubic on the gentle curves.
      EXPECT_TRUE(t->log_guess_ok) << alpha << " " << w;
      if (alpha <= 1.0f) {
        EXPECT_TRUE(t->poly_guess_ok) << alpha << " " << w;
      }
      std::mt19937 rng(static_cast<unsigned>(alpha * 1000 + w * 100));
      std::uniform_real_distribution<float> u(1.0f - 2 * w, 1.0f);  // around and above the knee
      for (int i = 0; i < 5000; ++i) {
        const float a = i == 0 ? 1.0f : u(rng);
        int f = std::min(std::max(static_cast<int>(std::floor(LogGuess(*t, a))), 0), t->max_code);
        f += a >= t->guess_high[f] ? 1 : 0;
        ASSERT_EQ(f, MagnitudeCode(*t, a)) << alpha << " " << w << " " << a;
        if (t->poly_guess_ok) {
          int g = std::min(static_cast<int>(PolyGuess(*t, a)), t->max_code);
          g += a >= t->guess_high[g] ? 1 : 0;
          ASSERT_EQ(g, MagnitudeCode(*t, a)) << alpha << " " << w << " " << a;
        }
      }
    }
  }
}

TEST(LynxMathTest, TheKneeNarrowsTheDefaultCurvesTopCellAndLeavesOtherWidthsPlain) {
  const CodecOptions o;
  const auto knee = GetLynxTables(o.alpha, o.top_width, 8);
  const auto plain = GetLynxTables(o.alpha, 0.0f, 8);
  EXPECT_GT(knee->thresholds[112], plain->thresholds[112]);  // a narrower outermost anchor cell
  EXPECT_TRUE(knee->poly_guess_ok);                           // the AVX-512 VBMI encoder keeps its fast path
  for (int bits : {2, 4, 5, 7}) {
    const auto t = GetLynxTables(o.alpha, o.top_width, bits);
    EXPECT_EQ(t->top_width, 0.0f) << bits;
    EXPECT_EQ(t->thresholds, GetLynxTables(o.alpha, 0.0f, bits)->thresholds) << bits;
  }
}

TEST(LynxMathTest, DecodeTablesPlaceEachPrefixInsideItsInterval) {
  const auto t = GetLynxTables(4.0f, 0.0f, 8);
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

// The grids of every end pair width a container may carry.
std::vector<int> AllGrids() {
  std::vector<int> grids;
  for (int bits = kMinEndPairBits; bits <= kMaxEndPairBits; ++bits) grids.push_back(EndGridMax(bits));
  return grids;
}

TEST(LynxMathTest, EachPairWidthsGridIsTheLargestEvenOneWhoseIndicesFit) {
  for (int bits = kMinEndPairBits; bits <= kMaxEndPairBits; ++bits) {
    const int g = EndGridMax(bits);
    EXPECT_EQ(g % 2, 0) << bits;
    EXPECT_LT(MaxEndPairIndex(g), 1u << bits) << bits;
    EXPECT_GE(MaxEndPairIndex(g + 2), 1u << bits) << bits;
    EXPECT_EQ(EndPairIndex(g, g), MaxEndPairIndex(g)) << bits;
  }
  EXPECT_EQ(EndGridMax(23), 4094);
  EXPECT_EQ(EndGridMax(14), 178);
}

TEST(LynxMathTest, ChunkEndsCoverTheChunkTightlyWithTheStoredValues) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1000.0f, 1000.0f);
  for (int grid : {4094, 178, 20}) {
    for (int i = 0; i < 20000; ++i) {
      float lo = u(rng), hi = u(rng);
      if (lo > hi) std::swap(lo, hi);
      const ChannelFrame f = MakeChannelFrame(lo, hi, grid);
      std::uniform_real_distribution<float> in(lo, hi);
      float cmin = in(rng), cmax = in(rng);
      if (cmin > cmax) std::swap(cmin, cmax);
      int q_low, q_high;
      QuantizeChunkEnds(f, Centering::kMidrange, cmin, cmax, 0.5f * cmin + 0.5f * cmax, q_low, q_high);
      ASSERT_GE(q_low, 0);
      ASSERT_LE(q_low, q_high);
      ASSERT_LE(q_high, grid);
      // The stored ends enclose the chunk, and are the nearest grid points that do.
      ASSERT_LE(ChunkEnd(f, q_low), cmin);
      ASSERT_GE(ChunkEnd(f, q_high), cmax);
      if (q_low < grid) {
        ASSERT_GT(ChunkEnd(f, q_low + 1), cmin);
      }
      if (q_high > q_low) {
        ASSERT_LT(ChunkEnd(f, q_high - 1), cmax);
      }
      ASSERT_LE(cmin - ChunkEnd(f, q_low), (hi - lo) / grid * 1.001f + 1e-4f);
      ASSERT_LE(ChunkEnd(f, q_high) - cmax, (hi - lo) / grid * 1.001f + 1e-4f);
      // mu +- sigma covers every value of the chunk in float arithmetic.
      float mu, sigma;
      ChunkCentreAndWidth(f, q_low, q_high, mu, sigma);
      ASSERT_LE(cmax - mu, sigma);
      ASSERT_LE(mu - cmin, sigma);
    }
  }
}

TEST(LynxMathTest, MeanCentredChunksAreCoveredEvenWhenTheMeanSitsAtOneEnd) {
  const ChannelFrame f = MakeChannelFrame(-3.0f, 7.0f, kEndGridMax);
  for (float m : {-3.0f, 7.0f, 2.0f, -2.5f}) {
    int q_low, q_high;
    QuantizeChunkEnds(f, Centering::kMean, -3.0f, 7.0f, m, q_low, q_high);
    float mu, sigma;
    ChunkCentreAndWidth(f, q_low, q_high, mu, sigma);
    EXPECT_LE(7.0f - mu, sigma) << m;
    EXPECT_LE(mu + 3.0f, sigma) << m;
  }
  // A mean-centred interval is symmetric about the mean where the channel range allows it.
  int q_low, q_high;
  QuantizeChunkEnds(f, Centering::kMean, 0.0f, 1.0f, 0.25f, q_low, q_high);
  EXPECT_LE(ChunkEnd(f, q_low), -0.5f);
  EXPECT_GE(ChunkEnd(f, q_high), 1.0f);
}

TEST(LynxMathTest, EndGridHasLoCentreAndHiExactlyAndIsMonotone) {
  for (int grid : AllGrids()) {
    const ChannelFrame f = MakeChannelFrame(-1.3f, 2.9f, grid);
    EXPECT_EQ(ChunkEnd(f, 0), -1.3f);
    EXPECT_EQ(ChunkEnd(f, grid / 2), f.centre);
    EXPECT_EQ(ChunkEnd(f, grid), 2.9f);
    for (int q = 1; q <= grid; ++q) ASSERT_LE(ChunkEnd(f, q - 1), ChunkEnd(f, q)) << q;
    // A constant channel: both ends at lo, sigma 0, so it decodes to exactly lo.
    const ChannelFrame flat = MakeChannelFrame(5.0f, 5.0f, grid);
    int q_low, q_high;
    QuantizeChunkEnds(flat, Centering::kMidrange, 5.0f, 5.0f, 5.0f, q_low, q_high);
    EXPECT_EQ(q_low, 0);
    EXPECT_EQ(q_high, 0);
    float mu, sigma;
    ChunkCentreAndWidth(flat, q_low, q_high, mu, sigma);
    EXPECT_EQ(mu, 5.0f);
    EXPECT_EQ(sigma, 0.0f);
  }
}

// The f32 quotient (q - C) / C, correctly rounded: the definition EndOffset and its division-free forms meet.
float DividedOffset(int q, int grid) {
  const float c = static_cast<float>(grid / 2);
  return (static_cast<float>(q) - c) / c;
}

TEST(LynxMathTest, DivisionFreeEndOffsetEqualsTheDividedOffsetAtEveryPointOfEveryGrid) {
  int off_by_product = 0;
  for (int grid : AllGrids()) {
    for (int q = 0; q <= grid; ++q) {
      const float want = DividedOffset(q, grid);
      const float fast = EndOffsetByReciprocal(q, grid);
      ASSERT_EQ(std::memcmp(&fast, &want, 4), 0) << "grid " << grid << " q " << q << ": " << fast << " vs " << want;
      const float c = static_cast<float>(grid / 2);
      off_by_product += (static_cast<float>(q) - c) * (1.0f / c) != want;
    }
  }
  // The test can fail: the uncorrected product is not the quotient everywhere.
  EXPECT_GT(off_by_product, 0);
}

TEST(LynxMathTest, TheGridsDoubleOffsetEqualsTheDividedOffsetAtEveryPointOfEveryGrid) {
  // lynx_grid.h's EndOffset, the one the reference and the kernels run.
  for (int grid : AllGrids()) {
    for (int q = 0; q <= grid; ++q) {
      const float offset = EndOffset(q, grid);
      const float want = DividedOffset(q, grid);
      ASSERT_EQ(std::memcmp(&offset, &want, 4), 0) << "grid " << grid << " q " << q << ": " << offset;
    }
  }
}

TEST(LynxMathTest, EndPairIndexRoundTripsEveryPairAndRejectsIndicesPastTheGrid) {
  for (int bits : {23, 14, 8}) {
    const int grid = EndGridMax(bits);
    for (int q_high = 0; q_high <= grid; ++q_high) {
      for (int q_low = 0; q_low <= q_high; ++q_low) {
        int a, b;
        ASSERT_TRUE(EndPairFromIndex(EndPairIndex(q_low, q_high), grid, a, b));
        ASSERT_EQ(a, q_low);
        ASSERT_EQ(b, q_high);
      }
    }
    int a, b;
    EXPECT_FALSE(EndPairFromIndex(MaxEndPairIndex(grid) + 1, grid, a, b)) << bits;
    EXPECT_FALSE(EndPairFromIndex((1u << bits) - 1, grid, a, b)) << bits;
  }
}

TEST(LynxMathTest, EndPairsPackIntoFieldsLsbFirstAtEveryWidth) {
  std::mt19937 rng(9);
  for (int bits = kMinEndPairBits; bits <= kMaxEndPairBits; ++bits) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{65}}) {
      std::vector<uint32_t> idx(n), back(n);
      for (auto& v : idx) v = rng() % (MaxEndPairIndex(EndGridMax(bits)) + 1);
      std::vector<uint8_t> bytes(EndPairBytes(n, bits), 0xFF);
      PackEndPairs(idx.data(), n, bits, bytes.data());
      UnpackEndPairs(bytes.data(), n, bits, back.data());
      EXPECT_EQ(idx, back) << bits << " bits, " << n;
      EXPECT_EQ(bytes.size(), (bits * n + 7) / 8);
    }
  }
  const uint32_t two[2] = {0x7FFFFF, 1};
  uint8_t out[6];
  PackEndPairs(two, 2, 23, out);
  EXPECT_EQ(out[0], 0xFF);
  EXPECT_EQ(out[1], 0xFF);
  EXPECT_EQ(out[2], 0x7F | 0x80);  // index 1's bit 0 is stream bit 23
  EXPECT_EQ(out[3], 0x00);
  EXPECT_EQ(out[5], 0x00);          // padding bits are zero
  const uint32_t fourteen[2] = {0x3FFF, 1};
  PackEndPairs(fourteen, 2, 14, out);
  EXPECT_EQ(out[0], 0xFF);
  EXPECT_EQ(out[1], 0x3F | 0x40);  // index 1's bit 0 is stream bit 14
  EXPECT_EQ(out[2], 0x00);
  EXPECT_EQ(out[3], 0x00);          // 28 bits: the last nibble is padding
}

// The packed stream bit by bit (field i's bit b at stream bit E i + b), against PackEndPairs' word-at-a-time paths
// (groups of 8 fields for E <= 16 and E = 23, then the serial tail) at lengths around their group and store sizes.
TEST(LynxMathTest, EndPairPackingEqualsTheStreamWrittenBitByBit) {
  std::mt19937 rng(4);
  for (int bits = kMinEndPairBits; bits <= kMaxEndPairBits; ++bits) {
    for (size_t n : {size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{23}, size_t{24}, size_t{64}, size_t{1001}}) {
      std::vector<uint32_t> idx(n);
      for (auto& v : idx) v = rng() % (MaxEndPairIndex(EndGridMax(bits)) + 1);
      std::vector<uint8_t> want(EndPairBytes(n, bits), 0);
      for (size_t i = 0; i < n; ++i) {
        for (int b = 0; b < bits; ++b) {
          const size_t bit = i * bits + b;
          want[bit / 8] |= static_cast<uint8_t>(((idx[i] >> b) & 1) << (bit % 8));
        }
      }
      std::vector<uint8_t> got(want.size(), 0xA5);
      PackEndPairs(idx.data(), n, bits, got.data());
      ASSERT_EQ(got, want) << bits << " bits, " << n << " fields";
    }
  }
}

TEST(LynxMathTest, ConditionalMeanTableIsTheCountWeightedMeanOfEachCell) {
  const auto t = GetLynxTables(0.5f, 0.0f, 8);
  std::vector<uint64_t> count(128, 0);
  count[127] = 3;   // cell 7 (I 112..127)
  count[112] = 1;
  count[5] = 10;    // cell 0
  const std::vector<float> table = ConditionalMeanTable(*t, count.data(), 4);
  ASSERT_EQ(table.size(), 8u);
  EXPECT_EQ(table[7], static_cast<float>((3.0 * t->full_values[127] + t->full_values[112]) / 4.0));
  EXPECT_EQ(table[0], t->full_values[5]);
  // Empty cells fall back to the code-centre value.
  for (int h = 1; h < 7; ++h) EXPECT_EQ(table[h], t->decode_table(4, AnchorRule::kCodeCentre)[h]) << h;
}

TEST(LynxMathTest, HugeRangesGiveFiniteFrames) {
  const float max = std::numeric_limits<float>::max();
  const ChannelFrame f = MakeChannelFrame(-max, max, kEndGridMax);
  EXPECT_TRUE(std::isfinite(f.half));
  EXPECT_EQ(f.centre, 0.0f);
  for (int q_low : {0, 1, 2047, 4093, 4094}) {
    for (int q_high : {0, 1, 2047, 4093, 4094}) {
      if (q_high < q_low) continue;
      float mu, sigma;
      ChunkCentreAndWidth(f, q_low, q_high, mu, sigma);
      EXPECT_TRUE(std::isfinite(mu));
      EXPECT_TRUE(std::isfinite(sigma));
      EXPECT_TRUE(std::isfinite(ChunkEnd(f, q_low)));
    }
  }
  int q_low, q_high;
  QuantizeChunkEnds(f, Centering::kMidrange, -max, max, 0.0f, q_low, q_high);
  EXPECT_EQ(q_low, 0);
  EXPECT_EQ(q_high, kEndGridMax);
  EXPECT_EQ(FinalValue(max, -max, InverseSigma(f.half)), 1.0f);  // (x - mu) overflows to inf, clamps to 1
  EXPECT_EQ(FinalValue(5.0f, 5.0f, 0.0f), 0.0f);   // flat chunk
}

}  // namespace
}  // namespace kvt::codec::internal
