// ParseProcStat on fixed /proc/stat texts (good and malformed), ShareBetween's fractions, and one real read.
#include "tools/kvtctl/host_cpu.h"

#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

constexpr char kStat[] =
    "cpu  100 5 50 800 20 3 2 20 0 0\n"
    "cpu0 50 2 25 400 10 1 1 10 0 0\n"
    "intr 12345\n";

TEST(ParseProcStat, SumsTheAggregateLineAndSeparatesIdleAndSteal) {
  absl::StatusOr<CpuTimes> t = ParseProcStat(kStat);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->total, 100u + 5 + 50 + 800 + 20 + 3 + 2 + 20);
  EXPECT_EQ(t->idle, 820u);
  EXPECT_EQ(t->steal, 20u);
}

TEST(ParseProcStat, RejectsTextWithoutTheAggregateLine) {
  EXPECT_EQ(ParseProcStat("cpu0 1 2 3 4 5 6 7 8\n").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProcStat("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseProcStat, RejectsALineWithoutTheStealCounter) {
  EXPECT_EQ(ParseProcStat("cpu  1 2 3 4 5 6 7\n").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseProcStat, RejectsACounterThatIsNotANumber) {
  absl::StatusOr<CpuTimes> t = ParseProcStat("cpu  1 2 3 x 5 6 7 8\n");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("'x'"), std::string::npos) << t.status();
  EXPECT_EQ(ParseProcStat("cpu  1 2 3 -4 5 6 7 8\n").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShareBetween, GivesTheStolenAndBusyFractionsOfTheTicksBetweenReadings) {
  const CpuTimes before{1000, 600, 100};
  const CpuTimes after{2000, 1000, 400};  // 1000 ticks: 400 idle, 300 stolen, 300 busy
  const std::optional<CpuShare> s = ShareBetween(before, after);
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->steal, 0.3);
  EXPECT_DOUBLE_EQ(s->busy, 0.3);
}

TEST(ShareBetween, IsUnknownWhenNoTickPassedOrACounterWentBackwards) {
  const CpuTimes t{1000, 600, 100};
  EXPECT_FALSE(ShareBetween(t, t).has_value());
  EXPECT_FALSE(ShareBetween(CpuTimes{2000, 1000, 400}, t).has_value());
  EXPECT_FALSE(ShareBetween(t, CpuTimes{2000, 500, 400}).has_value());  // idle fell: not the same counters
  EXPECT_FALSE(ShareBetween(t, CpuTimes{2000, 1000, 50}).has_value());  // steal fell
}

TEST(ReadCpuTimes, ReadsThisMachinesCountersWhereThereAreAny) {
  absl::StatusOr<CpuTimes> t = ReadCpuTimes();
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable) << t.status();
    GTEST_SKIP() << "no /proc/stat here: " << t.status();
  }
  EXPECT_GT(t->total, 0u);
  EXPECT_LE(t->idle + t->steal, t->total);
}

}  // namespace
}  // namespace kvt::kvtctl
