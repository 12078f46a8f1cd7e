// AllReduce across real processes: the test forks one child per rank, each builds a TcpWire mesh on a
// listener the parent bound to port 0, runs AllReduce and writes what it got to a file; the parent checks the
// results.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "transport/collective/all_reduce.h"
#include "transport/collective/all_reduce_testing.h"
#include "transport/collective/tcp_wire.h"

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

// The body of a child process: one record per config (int32 status code, int64 elapsed ms, kValues floats).
int RunChild(int rank, const std::vector<std::string>& peers, TcpListener listener, ChildRole role,
             const std::string& path) {
  auto wire = TcpWire::Create({.rank = rank, .peers = peers, .bootstrap_timeout = absl::Seconds(20)},
                              std::move(listener));
  if (!wire.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, wire.status().ToString().c_str());
    return 2;
  }
  if (role == ChildRole::kDieAfterBootstrap)
    _exit(0);  // as if killed: no goodbye, sockets closed by the kernel
  auto comm = WireCommunicator::Create(std::move(*wire));
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return 3;
  const std::vector<float> in = InputOf(rank);
  for (AllReduceOptions options : Configs()) {
    options.timeout = absl::Seconds(30);
    std::vector<float> out(kValues, std::nanf(""));
    const absl::Time start = absl::Now();
    const absl::Status status = (*comm)->AllReduce(in, absl::MakeSpan(out), options);
    const int32_t code = static_cast<int32_t>(status.code());
    const int64_t elapsed_ms = absl::ToInt64Milliseconds(absl::Now() - start);
    std::fwrite(&code, sizeof(code), 1, file);
    std::fwrite(&elapsed_ms, sizeof(elapsed_ms), 1, file);
    std::fwrite(out.data(), sizeof(float), out.size(), file);
    if (!status.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
      break;
    }
  }
  std::fclose(file);
  return 0;
}

struct Record {
  absl::StatusCode code;
  absl::Duration elapsed;
  std::vector<float> out;
};

std::vector<Record> ReadRecords(const std::string& path) {
  std::vector<Record> records;
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return records;
  while (true) {
    int32_t code;
    int64_t elapsed_ms;
    Record record{absl::StatusCode::kOk, absl::ZeroDuration(), std::vector<float>(kValues)};
    if (std::fread(&code, sizeof(code), 1, file) != 1 ||
        std::fread(&elapsed_ms, sizeof(elapsed_ms), 1, file) != 1 ||
        std::fread(record.out.data(), sizeof(float), kValues, file) != kValues) {
      break;
    }
    record.code = static_cast<absl::StatusCode>(code);
    record.elapsed = absl::Milliseconds(elapsed_ms);
    records.push_back(std::move(record));
  }
  std::fclose(file);
  return records;
}

// Forks the ranks (roles[r] for rank r), waits for all (killing any still running after 60 s) and returns
// each rank's records.
std::vector<std::vector<Record>> RunRanks(const std::vector<ChildRole>& roles) {
  const int world = static_cast<int>(roles.size());
  std::vector<TcpListener> listeners;
  std::vector<std::string> peers;
  for (int r = 0; r < world; ++r) {
    auto listener = TcpListener::Listen("127.0.0.1:0");
    EXPECT_TRUE(listener.ok()) << listener.status();
    peers.push_back(absl::StrFormat("127.0.0.1:%d", listener->port()));
    listeners.push_back(std::move(*listener));
  }
  const std::string dir = ::testing::TempDir();
  const std::string stem = absl::StrFormat("%s/tcp_all_reduce_%d_%d", dir, getpid(), rand());
  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      TcpListener mine = std::move(listeners[r]);
      listeners.clear();  // the other ranks' listeners belong to them
      _exit(RunChild(r, peers, std::move(mine), roles[r], absl::StrFormat("%s_%d", stem, r)));
    }
    EXPECT_GT(pid, 0);
    children.push_back(pid);
  }
  listeners.clear();
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  for (int r = 0; r < world; ++r) {
    int wstatus = 0;
    while (waitpid(children[r], &wstatus, WNOHANG) == 0) {
      if (absl::Now() > give_up) {
        ADD_FAILURE() << "rank " << r << " hung; killing it";
        kill(children[r], SIGKILL);
        waitpid(children[r], &wstatus, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "rank " << r << " status " << wstatus;
  }
  std::vector<std::vector<Record>> records;
  for (int r = 0; r < world; ++r) {
    records.push_back(ReadRecords(absl::StrFormat("%s_%d", stem, r)));
    std::remove(absl::StrFormat("%s_%d", stem, r).c_str());
  }
  return records;
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
      EXPECT_EQ(std::memcmp(records[r][c].out.data(), records[0][c].out.data(), kValues * sizeof(float)), 0)
          << "rank " << r << " config " << c;
    }
    const std::vector<double> bound = AllReduceErrorBound(inputs, configs[c]);
    for (size_t i = 0; i < kValues; ++i) {
      ASSERT_LE(std::fabs(records[0][c].out[i] - exact[i]), bound[i]) << "config " << c << " value " << i;
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
