#include "transport/bench/perftest_runner.h"

#include "gtest/gtest.h"

namespace kvt::transport {
namespace {

TEST(PerftestRunnerTest, BandwidthIsReadFromTheFinalLineInMebibytesPerSecond) {
  const std::string out =
      "|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |\n"
      "+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+\n"
      "Final:                  1000      1.650   966.788   966.788     1034.35    1034.35        1034        1034\n";
  auto bw = ParsePerftestBandwidth(out);
  ASSERT_TRUE(bw.ok()) << bw.status();
  EXPECT_DOUBLE_EQ(*bw, 1034.35 * 1024 * 1024);
}

TEST(PerftestRunnerTest, OutputWithoutAFinalLineIsInternal) {
  EXPECT_EQ(ParsePerftestBandwidth("connect failed\n").status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ParsePerftestBandwidth("Final: 10 1 2\n").status().code(), absl::StatusCode::kInternal);
}

TEST(PerftestRunnerTest, MissingProgramIsNotFound) {
  PerftestRun run;
  run.program = "kvt-no-such-perftest-program";
  EXPECT_EQ(RunUcxPerftest(run).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvt::transport
