#include "codec/internal/lynx_extremes.h"

#include <cstdint>
#include <random>
#include <vector>

#include "codec/internal/bitpack.h"
#include "codec/internal/lynx_math.h"
#include "gtest/gtest.h"

namespace kvt::codec::internal {
namespace {

struct Found {
  std::vector<int16_t> pos, neg;
};

Found Ref(const std::vector<uint8_t>& prefix, int rows, int channels, int known) {
  Found f{std::vector<int16_t>(channels), std::vector<int16_t>(channels)};
  RefChunkExtremes(prefix.data(), channels, rows, channels, TopCellPositive(known), TopCellNegative(known),
                   f.pos.data(), f.neg.data());
  return f;
}

TEST(LynxExtremesTest, FindsTheOnlyTopCellValueOfEachSign) {
  const int rows = 32, channels = 5, known = 4;  // top cells 0b0111 and 0b1111
  std::vector<uint8_t> p(rows * channels, 0x3);
  p[7 * channels + 0] = 0x7;                                  // channel 0: one positive at row 7
  p[2 * channels + 1] = 0xF;                                  // channel 1: one negative at row 2 ...
  p[9 * channels + 1] = 0x7;                                  // ... and one positive at row 9
  p[0 * channels + 2] = 0x7, p[31 * channels + 2] = 0x7;      // channel 2: two positives
  p[5 * channels + 3] = 0xF, p[6 * channels + 3] = 0xF;       // channel 3: two negatives ...
  p[6 * channels + 4] = 0x6, p[8 * channels + 4] = 0xE;       // channel 4: cells below the top only
  const Found f = Ref(p, rows, channels, known);
  EXPECT_EQ(f.pos, (std::vector<int16_t>{7, 9, kNoExtreme, kNoExtreme, kNoExtreme}));
  EXPECT_EQ(f.neg, (std::vector<int16_t>{kNoExtreme, 2, kNoExtreme, kNoExtreme, kNoExtreme}));
}

TEST(LynxExtremesTest, TopCellsFollowTheKnownBits) {
  EXPECT_EQ(TopCellPositive(1), 0);
  EXPECT_EQ(TopCellNegative(1), 1);
  EXPECT_EQ(TopCellPositive(2), 1);
  EXPECT_EQ(TopCellNegative(2), 3);
  EXPECT_EQ(TopCellPositive(6), 31);
  EXPECT_EQ(TopCellNegative(6), 63);
  EXPECT_EQ(TopCellPositive(7), 63);
  EXPECT_EQ(TopCellNegative(7), 127);
}

TEST(LynxExtremesTest, RowsUpTo256AreFoundIncludingTheLast) {
  const int rows = 256, channels = 3, known = 2;
  std::vector<uint8_t> p(rows * channels, 0);
  p[255 * channels + 0] = 1;  // positive top of a 2-bit prefix
  p[255 * channels + 1] = 3;
  p[0 * channels + 2] = 1;
  p[128 * channels + 2] = 1;
  const Found f = Ref(p, rows, channels, known);
  EXPECT_EQ(f.pos, (std::vector<int16_t>{255, kNoExtreme, kNoExtreme}));
  EXPECT_EQ(f.neg, (std::vector<int16_t>{kNoExtreme, 255, kNoExtreme}));
}

// Prefixes drawn so that top cells are frequent: most channels end with zero, one or several of each sign.
std::vector<uint8_t> RandomPrefixes(int rows, int channels, int known, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> p(static_cast<size_t>(rows) * channels);
  const int cells = 1 << known;
  for (uint8_t& v : p) v = static_cast<uint8_t>(rng() % (rng() % 8 == 0 ? cells : cells / 2 + 1));
  // Bias towards the top cells: rows 0 and rows / 2 hit them in about half the channels.
  for (int c = 0; c < channels; ++c) {
    if (rng() % 2) p[c] = TopCellPositive(known);
    if (rng() % 2) p[static_cast<size_t>(rows / 2) * channels + c] = TopCellNegative(known);
  }
  return p;
}

TEST(LynxExtremesTest, NibbleSearchEqualsTheByteSearch) {
  for (int channels : {2, 6, 126, 128, 130, 256, 1024, 1030}) {
    for (int rows : {1, 2, 31, 32, 64, 256}) {
      const std::vector<uint8_t> p = RandomPrefixes(rows, channels, 4, rows * 1000 + channels);
      std::vector<uint8_t> packed(PackedSize(p.size(), 4));
      PackField(p.data(), p.size(), 0, 4, packed.data());
      const Found want = Ref(p, rows, channels, 4);
      Found got{std::vector<int16_t>(channels), std::vector<int16_t>(channels)};
      RefChunkExtremesNibbles(packed.data(), rows, channels, got.pos.data(), got.neg.data());
      ASSERT_EQ(got.pos, want.pos) << channels << " x " << rows;
      ASSERT_EQ(got.neg, want.neg) << channels << " x " << rows;
      if (!Avx512BwAvailable()) continue;
      Found vec{std::vector<int16_t>(channels), std::vector<int16_t>(channels)};
      Avx512ChunkExtremesNibbles(packed.data(), rows, channels, vec.pos.data(), vec.neg.data());
      ASSERT_EQ(vec.pos, want.pos) << "avx512 nibbles " << channels << " x " << rows;
      ASSERT_EQ(vec.neg, want.neg) << "avx512 nibbles " << channels << " x " << rows;
    }
  }
}

TEST(LynxExtremesTest, Avx512SearchEqualsTheReference) {
  if (!Avx512BwAvailable()) GTEST_SKIP() << "no AVX-512BW on this CPU";
  for (int known : {1, 2, 4, 6, 7}) {
    for (int channels : {1, 63, 64, 65, 200, 1024}) {
      for (int rows : {1, 17, 32, 256}) {
        const std::vector<uint8_t> p = RandomPrefixes(rows, channels, known, known * 7 + rows * 1000 + channels);
        const Found want = Ref(p, rows, channels, known);
        Found got{std::vector<int16_t>(channels), std::vector<int16_t>(channels)};
        Avx512ChunkExtremes(p.data(), channels, rows, channels, TopCellPositive(known), TopCellNegative(known),
                            got.pos.data(), got.neg.data());
        ASSERT_EQ(got.pos, want.pos) << known << " bits, " << channels << " x " << rows;
        ASSERT_EQ(got.neg, want.neg) << known << " bits, " << channels << " x " << rows;
      }
    }
  }
}

// The table side's list, by brute force: for each sampled row, each channel's value if it is the only one of
// its channel in its sign's top cell (the bits `high` of the code bytes).
std::vector<uint32_t> BruteSampledSingles(const std::vector<uint8_t>& codes, int rows, int channels, uint8_t high,
                                          uint8_t tp, uint8_t tn, int phase) {
  std::vector<uint32_t> out;
  for (int r = 0; r < rows; ++r) {
    if ((phase + r) % kAnchorSampleStride != 0) continue;
    for (int c = 0; c < channels; ++c) {
      const uint8_t v = codes[r * channels + c] & high;
      if (v != tp && v != tn) continue;
      int same = 0;
      for (int q = 0; q < rows; ++q) same += (codes[q * channels + c] & high) == v;
      if (same == 1) out.push_back(static_cast<uint32_t>(r * channels + c));
    }
  }
  return out;
}

TEST(LynxExtremesTest, SampledSinglesEqualBruteForceInEveryImplementation) {
  std::mt19937 rng(3);
  int lists = 0;
  for (int channels : {1, 7, 8, 63, 64, 65, 130, 1024}) {
    for (int rows : {1, 3, 32, 256}) {
      for (int known : {2, 4}) {
        for (int shift : {0, 8 - known}) {
          const uint8_t high = static_cast<uint8_t>(0xFFu << shift);
          const uint8_t tp = static_cast<uint8_t>(TopCellPositive(known) << shift);
          const uint8_t tn = static_cast<uint8_t>(TopCellNegative(known) << shift);
          // Top cells rare enough that many channels hold exactly one.
          std::vector<uint8_t> codes(static_cast<size_t>(rows) * channels);
          for (uint8_t& b : codes) {
            const uint32_t u = rng();
            b = static_cast<uint8_t>(u % 97 == 0 ? tp | (u >> 8 & ~high) : u % 89 == 0 ? tn | (u >> 8 & ~high) : (u >> 8) & 0x3F & high);
          }
          for (int phase = 0; phase < kAnchorSampleStride; ++phase) {
            SCOPED_TRACE(::testing::Message() << channels << " channels, " << rows << " rows, known " << known
                                              << ", shift " << shift << ", phase " << phase);
            const std::vector<uint32_t> want = BruteSampledSingles(codes, rows, channels, high, tp, tn, phase);
            std::vector<uint32_t> got(2 * channels);
            got.resize(RefChunkSampledSingles(codes.data(), rows, channels, high, tp, tn, phase, got.data()));
            EXPECT_EQ(got, want);
            if (__builtin_cpu_supports("avx2")) {
              std::vector<uint32_t> vec(2 * channels);
              vec.resize(Avx2ChunkSampledSingles(codes.data(), rows, channels, high, tp, tn, phase, vec.data()));
              EXPECT_EQ(vec, want);
            }
            if (Avx512BwAvailable()) {
              std::vector<uint32_t> vec(2 * channels);
              vec.resize(Avx512ChunkSampledSingles(codes.data(), rows, channels, high, tp, tn, phase, vec.data()));
              EXPECT_EQ(vec, want);
            }
            lists += !want.empty();
          }
        }
      }
    }
  }
  EXPECT_GT(lists, 100);  // the data does hold singles at sampled rows
}

}  // namespace
}  // namespace kvt::codec::internal
