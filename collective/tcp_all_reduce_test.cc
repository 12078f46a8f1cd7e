// AllReduce across real processes: the test forks one child per rank, each builds a TcpWire mesh on a
// listener the parent bound to port 0, runs AllReduce and writes what it got to a file; the parent checks the
// results.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "collective/all_reduce.h"
#include "collective/all_reduce_testing.h"
#include "collective/multi_process_testing.h"
#include "collective/tcp_wire.h"

namespace kvt::collective {
namespace {

constexpr int kWorld = 3;
constexpr size_t kValues = 20011;

std::vector<AllReduceOptions> Configs() {
  return {
      {.step1_bits = 4, .step2_bits = 8, .chunk_bytes = 4 * 7000},
      {.step1_bits = 8, .step2_bits = 8},
      {.step1_bits = 5, .step2_bits = 6, .group_size = 64, .spike_reserve = true},
      {.step1_bits = 2, .step2_bits = 3, .group_size = 32, .spike_reserve = true},
      {.step1_bits = 0, .step2_bits = 0},
  };
}

std::vector<float> InputOf(int rank) { return RandomWithOutliers(kValues, 4242 + rank); }

enum class ChildRole { kReduce, kDieAfterBootstrap };

// The body of a child process: one record per config (status, elapsed time, kValues floats).
int RunChild(ForkedRank& self, ChildRole role) {
  auto wire =
      TcpWire::Create({.rank = self.rank, .peers = self.peers, .bootstrap_timeout = absl::Seconds(20)},
                      std::move(self.listener));
  if (!wire.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", self.rank, wire.status().ToString().c_str());
    return 2;
  }
  if (role == ChildRole::kDieAfterBootstrap)
    _exit(0);  // as if killed: no goodbye, sockets closed by the kernel
  auto comm = WireCommunicator::Create(std::move(*wire));
  const std::vector<float> in = InputOf(self.rank);
  for (AllReduceOptions options : Configs()) {
    options.timeout = absl::Seconds(30);
    std::vector<float> out(kValues, std::nanf(""));
    const absl::Time start = absl::Now();
    const absl::Status status = (*comm)->AllReduce(in, absl::MakeSpan(out), options);
    self.records.Write(status, out, absl::Now() - start);
    if (!status.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", self.rank, status.ToString().c_str());
      break;
    }
  }
  return 0;
}

// Runs the ranks (roles[r] for rank r) as processes, killing any still running after 60 s, and returns each
// rank's records.
std::vector<std::vector<Record>> RunRanks(const std::vector<ChildRole>& roles) {
  ForkedRun run = RunForked(static_cast<int>(roles.size()), absl::Seconds(60),
                            [&](ForkedRank& self) { return RunChild(self, roles[self.rank]); });
  for (const absl::Status& exit : run.exits) EXPECT_TRUE(exit.ok()) << exit;
  return std::move(run.records);
}

TEST(TcpAllReduceTest, ThreeProcessesGetBitwiseIdenticalResultsWithinTheStatedBound) {
  const auto records = RunRanks(std::vector<ChildRole>(kWorld, ChildRole::kReduce));
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < kWorld; ++r) inputs.push_back(InputOf(r));
  const std::vector<double> exact = ReferenceSum(inputs);
  const std::vector<AllReduceOptions> configs = Configs();
  for (int r = 0; r < kWorld; ++r) ASSERT_EQ(records[r].size(), configs.size()) << "rank " << r;
  for (size_t c = 0; c < configs.size(); ++c) {
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_EQ(records[r][c].code, absl::StatusCode::kOk) << "rank " << r << " config " << c;
      EXPECT_EQ(
          std::memcmp(records[r][c].values.data(), records[0][c].values.data(), kValues * sizeof(float)), 0)
          << "rank " << r << " config " << c;
    }
    const std::vector<double> bound = AllReduceErrorBound(inputs, configs[c]);
    for (size_t i = 0; i < kValues; ++i) {
      ASSERT_LE(std::fabs(records[0][c].values[i] - exact[i]), bound[i]) << "config " << c << " value " << i;
    }
  }
}

TEST(TcpAllReduceTest, ProcessThatDiesMakesTheOthersFailWithUnavailableLongBeforeTheTimeout) {
  const auto records = RunRanks({ChildRole::kReduce, ChildRole::kReduce, ChildRole::kDieAfterBootstrap});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(records[r].size(), 1u) << "rank " << r;  // the first call fails, and the child stops
    EXPECT_EQ(records[r][0].code, absl::StatusCode::kUnavailable) << "rank " << r;
    EXPECT_LT(records[r][0].elapsed, absl::Seconds(5)) << "rank " << r << " (timeout was 30 s)";
  }
}

}  // namespace
}  // namespace kvt::collective
