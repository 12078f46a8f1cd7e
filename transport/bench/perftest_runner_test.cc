#include "transport/bench/perftest_runner.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

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

// A stand-in for ucx_perftest that prints a bandwidth when given `-e` and fails otherwise, so a test can tell
// whether the runner passed it.
std::string FakePerftestNeedingErrorHandling() {
  const std::string path = testing::TempDir() + "/fake_ucx_perftest.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                         "case \" $* \" in\n"
                         "  *\" -e \"*) echo 'Final: 10 1.0 2.0 2.0 2048.00 2048.00 1 1' ;;\n"
                         "  *) echo 'no peer failure handler' ; exit 1 ;;\n"
                         "esac\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST(PerftestRunnerTest, ErrorHandlingIsAskedForWithDashE) {
  PerftestRun run;
  run.program = FakePerftestNeedingErrorHandling();
  run.error_handling = true;
  auto bw = RunUcxPerftest(run);
  ASSERT_TRUE(bw.ok()) << bw.status();
  EXPECT_DOUBLE_EQ(*bw, 2048.0 * 1024 * 1024);
}

TEST(PerftestRunnerTest, AProgramThatKeepsFailingIsInternal) {
  PerftestRun run;
  run.program = FakePerftestNeedingErrorHandling();
  run.error_handling = false;  // the fake refuses every attempt
  // The transport benchmark reads INTERNAL as "this mode does not run here" and retries in the other mode.
  EXPECT_EQ(RunUcxPerftest(run).status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace kvt::transport
