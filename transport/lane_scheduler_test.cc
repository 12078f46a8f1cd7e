#include "transport/lane_scheduler.h"

#include <vector>

#include "gtest/gtest.h"
#include "transport/fake_clock.h"

namespace kvt::transport {
namespace {

constexpr uint32_t kChunk = 1000;

// Drains `s` without advancing time; returns the stage of each chunk in send order.
std::vector<int> DrainStages(LaneScheduler& s, FakeClock& clock, absl::Duration per_chunk = absl::ZeroDuration()) {
  std::vector<int> stages;
  while (auto cut = s.Peek(clock.Now())) {
    stages.push_back(cut->stage);
    s.Commit(*cut, clock.Now());
    clock.Advance(per_chunk);
  }
  return stages;
}

TEST(LaneSchedulerTest, EmptySchedulerHasNothingToSend) {
  FakeClock clock;
  LaneScheduler s(kChunk, absl::Seconds(1));
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.Peek(clock.Now()).has_value());
}

TEST(LaneSchedulerTest, StreamIsCutIntoBoundedChunksFrontToBack) {
  FakeClock clock;
  LaneScheduler s(kChunk, absl::Seconds(1));
  s.Add({7, 0}, 0, 2500, clock.Now());
  std::vector<std::pair<uint64_t, uint32_t>> cuts;
  while (auto cut = s.Peek(clock.Now())) {
    cuts.emplace_back(cut->offset, cut->length);
    s.Commit(*cut, clock.Now());
  }
  EXPECT_EQ(cuts, (std::vector<std::pair<uint64_t, uint32_t>>{{0, 1000}, {1000, 1000}, {2000, 500}}));
  EXPECT_TRUE(s.empty());
}

TEST(LaneSchedulerTest, AnchorAddedAfterResidualsOvertakesThemAtTheNextChunk) {
  FakeClock clock;
  LaneScheduler s(kChunk, absl::Seconds(10));
  s.Add({1, 1}, 1, 5 * kChunk, clock.Now());
  auto first = s.Peek(clock.Now());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->stage, 1);
  s.Commit(*first, clock.Now());
  s.Add({2, 0}, 0, 3 * kChunk, clock.Now());
  EXPECT_EQ(DrainStages(s, clock), (std::vector<int>{0, 0, 0, 1, 1, 1, 1}));
}

TEST(LaneSchedulerTest, AnchorsOfEveryTransferGoBeforeAnyResidual) {
  FakeClock clock;
  LaneScheduler s(kChunk, absl::Seconds(10));
  s.Add({1, 0}, 0, 2 * kChunk, clock.Now());
  s.Add({1, 1}, 1, 2 * kChunk, clock.Now());
  s.Add({1, 2}, 2, 1 * kChunk, clock.Now());
  s.Add({2, 0}, 0, 2 * kChunk, clock.Now());
  s.Add({2, 1}, 1, 2 * kChunk, clock.Now());
  EXPECT_EQ(DrainStages(s, clock), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, 2}));
}

TEST(LaneSchedulerTest, ResidualWaitingPastTheBoundIsPromotedForOneChunk) {
  FakeClock clock;
  LaneScheduler s(kChunk, absl::Milliseconds(100));
  s.Add({1, 1}, 1, 3 * kChunk, clock.Now());
  s.Add({2, 0}, 0, 100 * kChunk, clock.Now());
  // One chunk every 10 ms: the residual lane is served once per 100 ms despite a never-empty anchor lane.
  std::vector<int> stages = DrainStages(s, clock, absl::Milliseconds(10));
  ASSERT_EQ(stages.size(), 103u);
  std::vector<size_t> residual_positions;
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i] == 1) residual_positions.push_back(i);
  }
  ASSERT_EQ(residual_positions.size(), 3u);
  EXPECT_EQ(residual_positions[0], 10u);
  EXPECT_EQ(residual_positions[1], 20u);
  EXPECT_EQ(residual_positions[2], 30u);
}

TEST(LaneSchedulerTest, PromotedCutIsMarked) {
  FakeClock clock;
  LaneScheduler s(kChunk, absl::Milliseconds(5));
  s.Add({1, 1}, 1, kChunk, clock.Now());
  s.Add({2, 0}, 0, kChunk, clock.Now());
  EXPECT_FALSE(s.Peek(clock.Now())->promoted);
  clock.Advance(absl::Milliseconds(5));
  auto cut = s.Peek(clock.Now());
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->stage, 1);
  EXPECT_TRUE(cut->promoted);
}

TEST(LaneSchedulerTest, RemovingATransferDropsOnlyItsStreams) {
  FakeClock clock;
  LaneScheduler s(kChunk, absl::Seconds(1));
  s.Add({1, 0}, 0, 1500, clock.Now());
  s.Add({2, 0}, 0, 700, clock.Now());
  s.Add({1, 1}, 1, 900, clock.Now());
  auto cut = s.Peek(clock.Now());
  s.Commit(*cut, clock.Now());  // 1000 bytes of transfer 1's anchor
  EXPECT_EQ(s.RemoveTransfer(1), 500u + 900u);
  EXPECT_EQ(s.queued_bytes(0), 700u);
  EXPECT_EQ(s.queued_bytes(1), 0u);
  cut = s.Peek(clock.Now());
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->key.transfer_id, 2u);
}

}  // namespace
}  // namespace kvt::transport
