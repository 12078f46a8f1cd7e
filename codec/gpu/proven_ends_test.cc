// ProvenEndBelow / ProvenEndAbove (codec/gpu/proven_ends.h), the tile encoder's way to a chunk's grid ends,
// against the reference's search (lynx_math.h QuantizeEndBelow / QuantizeEndAbove): whenever they answer, the
// ends and their ChunkEnd values must be the search's. Targets at every grid point of a frame and their float
// neighbours (where the window straddles a grid point), random targets over frames of every scale and offset, the
// page range's own ends, targets just outside it, and the edges of the proven domain. Every target inside the
// domain must be answered, and a window of no width must be caught. Host-only: the device runs the same code
// (RoundedReciprocal is __frcp_rn there).
#include "codec/gpu/proven_ends.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "codec/internal/lynx_math.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu::internal {
namespace {

namespace cpu = ::kvt::codec::internal;
static_assert(kProvenGridMax == cpu::kEndGridMax, "proven_ends.h's grid is lynx_math.h's");

// A page-channel's frame as the reference and as the proofs see it.
struct TestFrame {
  cpu::ChannelFrame ref;
  ProvenFrame proven;
};

// lo <= hi, stored as the encoder stores them (a zero as +0).
TestFrame MakeTestFrame(float lo, float hi) {
  lo = lo == 0.0f ? 0.0f : lo;
  hi = hi == 0.0f ? 0.0f : hi;
  TestFrame f;
  f.ref = cpu::MakeChannelFrame(lo, hi, cpu::kEndGridMax);
  f.proven = MakeProvenFrame(f.ref.lo, f.ref.hi, f.ref.centre, f.ref.half, RoundedReciprocal(f.ref.half));
  return f;
}

struct Tally {
  long checked = 0;     // targets
  long answered = 0;    // ... both ends answered
  long unanswered = 0;  // ... in the domain, yet not answered (a failure)
  long wrong = 0;
};

// One target t in [lo, hi], as a chunk minimum and as a chunk maximum: the ends and their ChunkEnd values.
void Check(const TestFrame& f, float t, Tally& tally) {
  ++tally.checked;
  auto end = [&](int q) { return cpu::ChunkEnd(f.ref, q); };
  const int below = cpu::QuantizeEndBelow(f.ref, t);
  const int above = cpu::QuantizeEndAbove(f.ref, t, 0);
  int proven_below = -1, proven_above = -1;
  float below_end = -1.0f, above_end = -1.0f;
  const bool has_below = ProvenEndBelow(f.proven, t, end, &proven_below, &below_end);
  const bool has_above = ProvenEndAbove(f.proven, t, end, &proven_above, &above_end);
  if (has_below && has_above) ++tally.answered;
  if (f.proven.ok && (!has_below || !has_above) && tally.unanswered++ < 5) {
    ADD_FAILURE() << "frame [" << f.ref.lo << ", " << f.ref.hi << "] in the domain, target " << t << " not answered";
  }
  bool wrong = false;
  if (has_below && (proven_below != below || below_end != end(below))) wrong = true;
  if (has_above) {
    if (proven_above != above || above_end != end(above)) wrong = true;
    // QuantizeEndAbove(b, q_low) is the larger of the smallest end and q_low, for any q_low: below it, at it and
    // past it (where the max decides).
    for (int q_low : {0, below, std::min(above + 1, cpu::kEndGridMax), cpu::kEndGridMax}) {
      if (std::max(proven_above, q_low) != cpu::QuantizeEndAbove(f.ref, t, q_low)) wrong = true;
    }
  }
  if (wrong && tally.wrong++ < 5) {
    ADD_FAILURE() << "frame [" << f.ref.lo << ", " << f.ref.hi << "] target " << t << ": below " << proven_below
                  << " (search " << below << "), above " << proven_above << " (search " << above << ")";
  }
}

// Every grid point's value and its two float neighbours either side: the targets with no margin at all.
void CheckGrid(const TestFrame& f, Tally& tally) {
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
std::vector<TestFrame> Frames(unsigned seed, int n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  std::vector<TestFrame> frames;
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
    if (lo < hi) frames.push_back(MakeTestFrame(lo, hi));
  }
  return frames;
}

// The answers of both functions for target t, -1 where they decline.
std::pair<int, int> Answers(const TestFrame& f, float t) {
  auto end = [&](int q) { return cpu::ChunkEnd(f.ref, q); };
  int below = -1, above = -1;
  float e;
  if (!ProvenEndBelow(f.proven, t, end, &below, &e)) below = -1;
  if (!ProvenEndAbove(f.proven, t, end, &above, &e)) above = -1;
  return {below, above};
}

TEST(ProvenEndsTest, AgreesWithTheSearchAtEveryGridPointAndItsNeighbours) {
  Tally tally;
  const std::vector<TestFrame> frames = Frames(/*seed=*/3, /*n=*/48);
  ASSERT_FALSE(frames.empty());
  for (const TestFrame& f : frames) CheckGrid(f, tally);
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_EQ(tally.unanswered, 0);
  EXPECT_GT(tally.checked, 48L * 4095 * 3);
  EXPECT_GT(tally.answered, tally.checked / 2);
}

TEST(ProvenEndsTest, AgreesWithTheSearchOnRandomTargetsAndAnswersAllInItsDomain) {
  Tally tally;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const std::vector<TestFrame> frames = Frames(/*seed=*/5, /*n=*/4000);
  ASSERT_FALSE(frames.empty());
  for (const TestFrame& f : frames) {
    for (int j = 0; j < 200; ++j) {
      float t = f.ref.lo + (f.ref.hi - f.ref.lo) * unit(rng);
      t = std::min(std::max(t, f.ref.lo), f.ref.hi);
      Check(f, t, tally);
    }
    Check(f, f.ref.lo, tally);  // the page range's own ends: every channel has them
    Check(f, f.ref.hi, tally);
  }
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_EQ(tally.unanswered, 0);  // every target of an in-domain frame, offsets up to 1024 half-widths included
  EXPECT_GT(tally.answered, tally.checked / 2);
  EXPECT_LT(tally.answered, tally.checked);  // the large offsets reach past the domain
}

TEST(ProvenEndsTest, ThePageRangeEndsAreAnsweredExactly) {
  Tally tally;
  for (const TestFrame& f : Frames(/*seed=*/9, /*n=*/2000)) {
    if (!f.proven.ok) continue;
    EXPECT_EQ(Answers(f, f.ref.lo), std::make_pair(0, 0));
    EXPECT_EQ(Answers(f, f.ref.hi), std::make_pair(cpu::kEndGridMax, cpu::kEndGridMax));
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
  const float inf = std::numeric_limits<float>::infinity();
  // Each frame's grid and neighbours; frames outside the domain must not answer at all.
  const std::vector<std::pair<float, float>> ranges = {
      {-1.0f, 1.0f},          {0.0f, 1.0f},          {-3e38f, 3e38f},       {-big, big},
      {0.0f, 0x1p-99f},       {0.0f, 0x1p-101f},     {-0x1p100f, 0x1p100f}, {-0x1p101f, 0x1p101f},
      {1000.0f, 1002.0f},     {1022.0f, 1024.0f},    {1023.0f, 1025.0f},    {2047.0f, 2049.0f},
      {tiny, 4.0f * tiny},    {-1e-30f, 1e-30f},     {5.0f, 5.0f},          {0.0f, 0.0f},
      {-0x1p-126f, 0x1p-126f}};
  for (const auto& [lo, hi] : ranges) {
    const TestFrame f = MakeTestFrame(lo, hi);
    CheckGrid(f, tally);
    if (!f.proven.ok) {
      EXPECT_EQ(Answers(f, f.ref.lo), std::make_pair(-1, -1)) << lo << ", " << hi;
      EXPECT_EQ(Answers(f, f.ref.hi), std::make_pair(-1, -1)) << lo << ", " << hi;
    }
  }
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_EQ(tally.unanswered, 0);
  EXPECT_TRUE(MakeTestFrame(0.0f, 0x1p-99f).proven.ok);         // half 2^-100
  EXPECT_FALSE(MakeTestFrame(0.0f, 0x1p-101f).proven.ok);       // half below 2^-100
  EXPECT_TRUE(MakeTestFrame(-0x1p100f, 0x1p100f).proven.ok);    // half 2^100
  EXPECT_FALSE(MakeTestFrame(-0x1p101f, 0x1p101f).proven.ok);   // half above 2^100
  EXPECT_FALSE(MakeTestFrame(5.0f, 5.0f).proven.ok);            // flat: the caller's half == 0 rule
  EXPECT_TRUE(MakeTestFrame(1022.0f, 1024.0f).proven.ok);       // |centre| / half = 1023
  EXPECT_FALSE(MakeTestFrame(1024.0f, 1026.0f).proven.ok);      // 1025
  EXPECT_FALSE(MakeTestFrame(2047.0f, 2049.0f).proven.ok);      // 2048
  // Targets outside [lo, hi], by one float or more, infinite or NaN: no answer, even where v stays in range.
  for (const auto& [lo, hi] : std::vector<std::pair<float, float>>{{-1.0f, 1.0f}, {1000.0f, 1002.0f}}) {
    const TestFrame f = MakeTestFrame(lo, hi);
    for (float t : {std::nextafter(lo, -inf), std::nextafter(hi, inf), lo - 0.5f * (hi - lo),
                    hi + 0.5f * (hi - lo), -inf, inf, std::nanf("")}) {
      EXPECT_EQ(Answers(f, t), std::make_pair(-1, -1)) << "[" << lo << ", " << hi << "] target " << t;
    }
  }
}

// The test can fail: with a window of no width (floor(v) alone) the answers next to grid points are wrong.
TEST(ProvenEndsTest, AWindowOfNoWidthIsCaught) {
  long checked = 0, wrong = 0;
  for (TestFrame f : Frames(/*seed=*/3, /*n=*/16)) {
    if (!f.proven.ok) continue;
    f.proven.slack = 0.0f;
    for (int q = 1; q < cpu::kEndGridMax; ++q) {
      const float t = cpu::ChunkEnd(f.ref, q);
      const int proven = Answers(f, t).first;
      if (proven >= 0 && proven != cpu::QuantizeEndBelow(f.ref, t)) ++wrong;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(wrong, 0);
}

}  // namespace
}  // namespace kvt::codec::gpu::internal
