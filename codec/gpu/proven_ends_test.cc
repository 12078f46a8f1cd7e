// ProvenEndBelow / ProvenEndAbove (codec/gpu/proven_ends.h), the tile encoder's way to a chunk's grid ends,
// against the reference's search (lynx_math.h QuantizeEndBelow / QuantizeEndAbove): whenever they answer, the ends
// and their ChunkEnd values must be the search's. Targets at every grid point of a frame and their float neighbours
// (where the window straddles a grid point), random targets over frames of every scale and offset, the page range's own ends, and
// the edges of the proven domain. Every target inside the domain must be answered, and a window of no width
// must be caught. Host-only: the device runs the same code, with __frcp_rn for the reciprocal.
#include "codec/gpu/proven_ends.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "codec/internal/lynx_math.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu::internal {
namespace {

namespace cpu = ::kvt::codec::internal;

struct Frame {
  cpu::ChannelFrame ref;
  ProvenFrame proven;
};

// lo <= hi, stored as the encoder stores them (a zero as +0).
Frame MakeFrame(float lo, float hi) {
  lo = lo == 0.0f ? 0.0f : lo;
  hi = hi == 0.0f ? 0.0f : hi;
  Frame f;
  f.ref = cpu::MakeChannelFrame(lo, hi);
  f.proven = MakeProvenFrame(f.ref.lo, f.ref.hi, f.ref.centre, f.ref.half, RoundedReciprocal(f.ref.half));
  return f;
}

struct Tally {
  long checked = 0;   // targets
  long answered = 0;  // ... the shortcut answered
  long wrong = 0;
};

// One target t in [lo, hi], as a chunk minimum and as a chunk maximum: the ends and their ChunkEnd values.
void Check(const Frame& f, float t, Tally& tally) {
  ++tally.checked;
  auto end = [&](int q) { return cpu::ChunkEnd(f.ref, q); };
  const int below = cpu::QuantizeEndBelow(f.ref, t);
  const int above = cpu::QuantizeEndAbove(f.ref, t, 0);
  float below_end = -1.0f, above_end = -1.0f;
  const int proven_below = ProvenEndBelow(f.proven, t, end, &below_end);
  const int proven_above = ProvenEndAbove(f.proven, t, end, &above_end);
  if (proven_below >= 0 && proven_above >= 0) ++tally.answered;
  bool wrong = false;
  if (proven_below >= 0 && (proven_below != below || below_end != end(below))) wrong = true;
  if (proven_above >= 0) {
    if (proven_above != above || above_end != end(above)) wrong = true;
    // QuantizeEndAbove(b, q_low) is the larger of the smallest end and q_low, for any q_low up to it.
    for (int q_low : {below, std::max(0, above - 1), above}) {
      if (q_low <= above && std::max(proven_above, q_low) != cpu::QuantizeEndAbove(f.ref, t, q_low)) wrong = true;
    }
  }
  if (wrong && tally.wrong++ < 5) {
    ADD_FAILURE() << "frame [" << f.ref.lo << ", " << f.ref.hi << "] target " << t << ": below " << proven_below
                  << " (search " << below << "), above " << proven_above << " (search " << above << ")";
  }
}

// Every grid point's value and its two float neighbours either side: the targets with no margin at all.
void CheckGrid(const Frame& f, Tally& tally) {
  for (int q = 0; q <= cpu::kEndGridMax; ++q) {
    const float e = cpu::ChunkEnd(f.ref, q);
    float down = e, up = e;
    Check(f, e, tally);
    for (int i = 0; i < 2; ++i) {
      down = std::nextafter(down, -std::numeric_limits<float>::infinity());
      up = std::nextafter(up, std::numeric_limits<float>::infinity());
      if (down >= f.ref.lo) Check(f, down, tally);
      if (up <= f.ref.hi) Check(f, up, tally);
    }
  }
}

// Frames of realistic KV ranges, offsets and scales.
std::vector<Frame> Frames(unsigned seed, int n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  std::vector<Frame> frames;
  for (int i = 0; i < n; ++i) {
    const float scale = std::ldexp(1.0f, exponent(rng)) * (1.0f + unit(rng));
    float lo, hi;
    switch (i % 4) {
      case 0:  // around zero
        lo = -scale * unit(rng), hi = scale * unit(rng);
        break;
      case 1:  // one-sided
        lo = scale * unit(rng) * 0.5f, hi = scale * (0.5f + unit(rng));
        break;
      case 2:  // offset: |centre| / half up to ~1000, across the domain's edge at 1024
        lo = scale * (1.0f + 1200.0f * unit(rng)), hi = lo + scale * (0.5f + unit(rng));
        break;
      default:  // negative offset, small offsets
        hi = -scale * (1.0f + 5.0f * unit(rng)), lo = hi - scale * (0.5f + unit(rng));
        break;
    }
    if (lo > hi) std::swap(lo, hi);
    if (lo < hi) frames.push_back(MakeFrame(lo, hi));
  }
  return frames;
}

TEST(ProvenEndsTest, AgreesWithTheSearchAtEveryGridPointAndItsNeighbours) {
  Tally tally;
  const std::vector<Frame> frames = Frames(/*seed=*/3, /*n=*/48);
  ASSERT_FALSE(frames.empty());
  for (const Frame& f : frames) CheckGrid(f, tally);
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_GT(tally.checked, 48L * 4095 * 3);
  EXPECT_GT(tally.answered, tally.checked / 2);
}

TEST(ProvenEndsTest, AgreesWithTheSearchOnRandomTargetsAndAnswersAllInItsDomain) {
  Tally tally, typical;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const std::vector<Frame> frames = Frames(/*seed=*/5, /*n=*/4000);
  ASSERT_FALSE(frames.empty());
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    for (int j = 0; j < 200; ++j) {
      float t = f.ref.lo + (f.ref.hi - f.ref.lo) * unit(rng);
      t = std::min(std::max(t, f.ref.lo), f.ref.hi);
      Check(f, t, tally);
      if (i % 4 != 2) Check(f, t, typical);  // not the large offsets
    }
    Check(f, f.ref.lo, tally);  // the page range's own ends: every channel has them
    Check(f, f.ref.hi, tally);
  }
  EXPECT_EQ(tally.wrong, 0);
  // Inside the domain every target is answered: only frames offset past |centre| / half = 1024 are searched.
  ASSERT_GT(typical.checked, 0);
  EXPECT_EQ(typical.answered, typical.checked);
  EXPECT_LT(tally.answered, tally.checked);  // the large offsets reach past the domain
}

TEST(ProvenEndsTest, ThePageRangeEndsAreAnsweredExactly) {
  Tally tally;
  for (const Frame& f : Frames(/*seed=*/9, /*n=*/2000)) {
    if (!f.proven.ok) continue;
    auto end = [&](int q) { return cpu::ChunkEnd(f.ref, q); };
    float e;
    EXPECT_EQ(ProvenEndBelow(f.proven, f.ref.lo, end, &e), 0);
    EXPECT_EQ(ProvenEndAbove(f.proven, f.ref.hi, end, &e), cpu::kEndGridMax);
    EXPECT_EQ(ProvenEndBelow(f.proven, f.ref.hi, end, &e), cpu::kEndGridMax);
    EXPECT_EQ(ProvenEndAbove(f.proven, f.ref.lo, end, &e), 0);
    Check(f, f.ref.lo, tally);
    Check(f, f.ref.hi, tally);
  }
  EXPECT_GT(tally.checked, 0);
  EXPECT_EQ(tally.wrong, 0);
}

TEST(ProvenEndsTest, TheDomainsEdgesAndBadTargets) {
  Tally tally;
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  // Each frame's grid and neighbours; frames outside the domain must not answer at all.
  const std::vector<std::pair<float, float>> ranges = {
      {-1.0f, 1.0f},          {0.0f, 1.0f},          {-3e38f, 3e38f},       {-big, big},
      {0.0f, 0x1p-99f},       {0.0f, 0x1p-101f},     {-0x1p100f, 0x1p100f}, {-0x1p101f, 0x1p101f},
      {1000.0f, 1002.0f},     {1022.0f, 1024.0f},    {1023.0f, 1025.0f},    {2047.0f, 2049.0f},
      {tiny, 4.0f * tiny},    {-1e-30f, 1e-30f},     {5.0f, 5.0f},          {0.0f, 0.0f},
      {-0x1p-126f, 0x1p-126f}};
  for (const auto& [lo, hi] : ranges) {
    const Frame f = MakeFrame(lo, hi);
    CheckGrid(f, tally);
    if (!f.proven.ok) {
      float e;
      auto end = [&](int q) { return cpu::ChunkEnd(f.ref, q); };
      EXPECT_EQ(ProvenEndBelow(f.proven, lo, end, &e), -1) << lo << ", " << hi;
      EXPECT_EQ(ProvenEndAbove(f.proven, hi, end, &e), -1) << lo << ", " << hi;
    }
  }
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_FALSE(MakeFrame(0.0f, 0x1p-101f).proven.ok);   // half below 2^-100
  EXPECT_FALSE(MakeFrame(5.0f, 5.0f).proven.ok);        // flat: the caller's half == 0 rule
  EXPECT_FALSE(MakeFrame(2047.0f, 2049.0f).proven.ok);  // |centre| / half = 2048
  EXPECT_TRUE(MakeFrame(1000.0f, 1002.0f).proven.ok);   // 1001
  // Targets outside [lo, hi] or NaN: no answer.
  const Frame f = MakeFrame(-1.0f, 1.0f);
  auto end = [&](int q) { return cpu::ChunkEnd(f.ref, q); };
  for (float t : {-1.5f, 1.5f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    float e;
    EXPECT_EQ(ProvenEndBelow(f.proven, t, end, &e), -1) << t;
    EXPECT_EQ(ProvenEndAbove(f.proven, t, end, &e), -1) << t;
  }
}

// The test can fail: with a window of no width (floor(v) alone) the answers next to grid points are wrong.
TEST(ProvenEndsTest, AWindowOfNoWidthIsCaught) {
  long checked = 0, wrong = 0;
  for (Frame f : Frames(/*seed=*/3, /*n=*/16)) {
    if (!f.proven.ok) continue;
    f.proven.slack = 0.0f;
    auto end = [&](int q) { return cpu::ChunkEnd(f.ref, q); };
    for (int q = 1; q < cpu::kEndGridMax; ++q) {
      const float t = end(q);
      float e;
      const int proven = ProvenEndBelow(f.proven, t, end, &e);
      if (proven >= 0 && proven != cpu::QuantizeEndBelow(f.ref, t)) ++wrong;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(wrong, 0);
}

}  // namespace
}  // namespace kvt::codec::gpu::internal
