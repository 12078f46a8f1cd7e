// StageProfile: per-stage counts, busy time, first start and last end relative to the request, bytes.
#include "server/stage_profile.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::server {
namespace {

TEST(StageProfile, AccumulatesCountBusyBytesAndTheSpanOfEachStage) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  StageProfile p(start);
  p.Add(Stage::kEncode, start + absl::Milliseconds(5), start + absl::Milliseconds(7), 100);
  p.Add(Stage::kEncode, start + absl::Milliseconds(2), start + absl::Milliseconds(3), 50);
  p.Add(Stage::kArriveAnchor, start + absl::Milliseconds(9), start + absl::Milliseconds(9), 10);
  const auto s = p.Snapshot();
  const StageTotals& e = s[static_cast<int>(Stage::kEncode)];
  EXPECT_EQ(e.count, 2u);
  EXPECT_EQ(e.busy, absl::Milliseconds(3));
  EXPECT_EQ(e.first_start, absl::Milliseconds(2));
  EXPECT_EQ(e.last_end, absl::Milliseconds(7));
  EXPECT_EQ(e.bytes, 150u);
  const StageTotals& a = s[static_cast<int>(Stage::kArriveAnchor)];
  EXPECT_EQ(a.count, 1u);
  EXPECT_EQ(a.busy, absl::ZeroDuration());
  EXPECT_EQ(a.first_start, absl::Milliseconds(9));
  EXPECT_EQ(s[static_cast<int>(Stage::kDecodeFull)].count, 0u);
}

TEST(StageProfile, AnEndBeforeItsBeginCountsAsAnInstant) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  StageProfile p(start);
  p.Add(Stage::kSend, start + absl::Milliseconds(4), start + absl::Milliseconds(1));
  const StageTotals t = p.Snapshot()[static_cast<int>(Stage::kSend)];
  EXPECT_EQ(t.busy, absl::ZeroDuration());
  EXPECT_EQ(t.last_end, absl::Milliseconds(4));
}

TEST(StageProfile, ConcurrentAddsAreAllCounted) {
  const absl::Time start = absl::Now();
  StageProfile p(start);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 1000; ++j) p.Add(Stage::kDecodeAnchor, start, start + absl::Microseconds(1), 2);
    });
  }
  for (auto& t : threads) t.join();
  const StageTotals t = p.Snapshot()[static_cast<int>(Stage::kDecodeAnchor)];
  EXPECT_EQ(t.count, 4000u);
  EXPECT_EQ(t.bytes, 8000u);
  EXPECT_EQ(t.busy, absl::Microseconds(4000));
}

TEST(StageProfile, EveryStageHasAName) {
  for (int i = 0; i < kStageCount; ++i) EXPECT_NE(StageName(static_cast<Stage>(i)), "unknown") << i;
}

}  // namespace
}  // namespace kvt::server
