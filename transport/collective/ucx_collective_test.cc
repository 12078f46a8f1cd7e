// AllReduce and Dispatch/Combine across real processes over the UCX wire, once per UCX transport set: the
// test forks one child per rank; each bootstraps a TcpWire mesh on a listener the parent bound to port 0,
// builds UcxWires over it, runs the collectives and writes what it got to a file; the parent checks them.
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
#include "transport/collective/moe.h"
#include "transport/collective/moe_testing.h"
#include "transport/collective/tcp_wire.h"
#include "transport/collective/ucx_wire.h"

namespace kvt::collective {
namespace {

constexpr int kWorld = 3;
constexpr size_t kValues = 20011;

std::vector<AllReduceOptions> AllReduceConfigs() {
  return {
      {.step1_bits = 4, .step2_bits = 8, .chunk_bytes = 4 * 7000},
      {.step1_bits = 5, .step2_bits = 6, .group_size = 64, .spike_reserve = true},
      {.step1_bits = 0, .step2_bits = 0},
  };
}

std::vector<DispatchOptions> DispatchConfigs() {
  return {{.quant = DispatchQuant::kFp8},
          {.quant = DispatchQuant::kInt, .bits = 4},
          {.quant = DispatchQuant::kNone}};
}

std::vector<float> AllReduceInput(int rank) { return RandomWithOutliers(kValues, 777 + rank); }

// Two batches per config, dispatched back to back before either is combined.
MoeRankData MoeInput(int rank, int config, int batch) {
  return RandomMoeRankData(40 + 9 * rank + batch, 256, 4, 4 * kWorld, 1000 * config + 10 * batch + rank);
}

enum class ChildRole { kRun, kDieAfterBootstrap };

void WriteRecord(FILE* file, absl::Status status, const std::vector<float>& out) {
  const int32_t code = static_cast<int32_t>(status.code());
  const uint64_t n = out.size();
  std::fwrite(&code, sizeof(code), 1, file);
  std::fwrite(&n, sizeof(n), 1, file);
  std::fwrite(out.data(), sizeof(float), out.size(), file);
}

// The body of a child: one record (int32 code, u64 n, n floats) per AllReduce config, then per dispatch
// config two (batch 0 and 1). A failure writes its record and stops.
int RunChild(int rank, const std::vector<std::string>& peers, TcpListener listener, const UcxWireOptions& ucx,
             ChildRole role, const std::string& path) {
  auto bootstrap = TcpWire::Create({.rank = rank, .peers = peers, .bootstrap_timeout = absl::Seconds(20)},
                                   std::move(listener));
  if (!bootstrap.ok()) return 2;
  auto reduce_wire = UcxWire::Create(ucx, **bootstrap);
  auto moe_wire = UcxWire::Create(ucx, **bootstrap);
  if (!reduce_wire.ok() || !moe_wire.ok()) {
    std::fprintf(stderr, "rank %d: %s %s\n", rank, reduce_wire.status().ToString().c_str(),
                 moe_wire.status().ToString().c_str());
    return 3;
  }
  if (role == ChildRole::kDieAfterBootstrap) _exit(0);  // as if killed
  auto comm = WireCommunicator::Create(std::move(*reduce_wire));
  auto a2a = ExpertAllToAll::Create(std::move(*moe_wire));
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return 4;
  const std::vector<float> in = AllReduceInput(rank);
  for (AllReduceOptions options : AllReduceConfigs()) {
    options.timeout = absl::Seconds(30);
    std::vector<float> out(kValues);
    const absl::Status status = (*comm)->AllReduce(in, absl::MakeSpan(out), options);
    WriteRecord(file, status, out);
    if (!status.ok()) {
      std::fclose(file);
      return 0;
    }
  }
  const std::vector<DispatchOptions> configs = DispatchConfigs();
  for (size_t c = 0; c < configs.size(); ++c) {
    const MoeRankData data[2] = {MoeInput(rank, c, 0), MoeInput(rank, c, 1)};
    const DispatchResult* dispatched[2] = {nullptr, nullptr};
    absl::Status status;
    for (int b = 0; b < 2 && status.ok(); ++b) {
      auto d = (*a2a)->Dispatch(data[b].Input(), configs[c]);
      status = d.status();
      if (d.ok()) dispatched[b] = *d;
    }
    for (int b = 0; b < 2; ++b) {
      std::vector<float> out(data[b].tokens.size());
      if (status.ok()) {
        status = (*a2a)->Combine(*dispatched[b], RunScaleExperts(*dispatched[b], rank), absl::MakeSpan(out));
      }
      WriteRecord(file, status, out);
    }
    if (!status.ok()) break;
  }
  std::fclose(file);
  return 0;
}

struct Record {
  absl::StatusCode code;
  std::vector<float> out;
};

std::vector<Record> ReadRecords(const std::string& path) {
  std::vector<Record> records;
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return records;
  while (true) {
    int32_t code;
    uint64_t n;
    if (std::fread(&code, sizeof(code), 1, file) != 1 || std::fread(&n, sizeof(n), 1, file) != 1) break;
    Record record{static_cast<absl::StatusCode>(code), std::vector<float>(n)};
    if (std::fread(record.out.data(), sizeof(float), n, file) != n) break;
    records.push_back(std::move(record));
  }
  std::fclose(file);
  return records;
}

struct Transports {
  const char* name;
  UcxWireOptions options;
};

class UcxCollectiveTest : public ::testing::TestWithParam<Transports> {
 protected:
  // Forks the ranks, waits for all (killing any still running after 90 s), returns each rank's records.
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
    const std::string stem =
        absl::StrFormat("%s/ucx_collective_%d_%d", ::testing::TempDir(), getpid(), rand());
    std::vector<pid_t> children;
    for (int r = 0; r < world; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        TcpListener mine = std::move(listeners[r]);
        listeners.clear();
        _exit(RunChild(r, peers, std::move(mine), GetParam().options, roles[r],
                       absl::StrFormat("%s_%d", stem, r)));
      }
      EXPECT_GT(pid, 0);
      children.push_back(pid);
    }
    listeners.clear();
    const absl::Time give_up = absl::Now() + absl::Seconds(90);
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
};

TEST_P(UcxCollectiveTest, ThreeProcessesAllReduceAndDispatchCombineWithinTheStatedBounds) {
  const auto records = RunRanks(std::vector<ChildRole>(kWorld, ChildRole::kRun));
  const std::vector<AllReduceOptions> reduce_configs = AllReduceConfigs();
  const std::vector<DispatchOptions> dispatch_configs = DispatchConfigs();
  const size_t expected = reduce_configs.size() + 2 * dispatch_configs.size();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(records[r].size(), expected) << "rank " << r;
    for (size_t i = 0; i < expected; ++i)
      ASSERT_EQ(records[r][i].code, absl::StatusCode::kOk) << r << " " << i;
  }
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < kWorld; ++r) inputs.push_back(AllReduceInput(r));
  const std::vector<double> exact = ReferenceSum(inputs);
  for (size_t c = 0; c < reduce_configs.size(); ++c) {
    const std::vector<double> bound = AllReduceErrorBound(inputs, reduce_configs[c]);
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_EQ(std::memcmp(records[r][c].out.data(), records[0][c].out.data(), kValues * sizeof(float)), 0)
          << "AllReduce config " << c << " rank " << r;
    }
    for (size_t i = 0; i < kValues; ++i) {
      ASSERT_LE(std::fabs(records[0][c].out[i] - exact[i]), bound[i])
          << "AllReduce config " << c << " value " << i;
    }
  }
  for (size_t c = 0; c < dispatch_configs.size(); ++c) {
    for (int b = 0; b < 2; ++b) {
      for (int r = 0; r < kWorld; ++r) {
        const MoeRankData data = MoeInput(r, c, b);
        const std::vector<double> want = ReferenceCombine(data);
        const std::vector<double> bound = CombineErrorBound(data, dispatch_configs[c]);
        const std::vector<float>& got = records[r][reduce_configs.size() + 2 * c + b].out;
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_LE(std::fabs(got[i] - want[i]), bound[i])
              << "dispatch config " << c << " batch " << b << " rank " << r << " value " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxCollectiveTest,
                         ::testing::Values(Transports{"Tcp", {.tls = "tcp", .net_devices = "lo"}},
                                           Transports{"SharedMemory",
                                                      {.tls = "posix,tcp", .net_devices = "lo"}}),
                         [](const auto& info) { return std::string(info.param.name); });

// Peer failure handling needs tcp (UCX 1.13's shared memory has none): a dead process turns into UNAVAILABLE.
class UcxTcpFailureTest : public UcxCollectiveTest {};

TEST_P(UcxTcpFailureTest, ProcessThatDiesMakesTheOthersFailWithUnavailableBeforeTheTimeout) {
  const auto records = RunRanks({ChildRole::kRun, ChildRole::kRun, ChildRole::kDieAfterBootstrap});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(records[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(records[r][0].code, absl::StatusCode::kUnavailable) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Tcp, UcxTcpFailureTest,
                         ::testing::Values(Transports{"Tcp", {.tls = "tcp", .net_devices = "lo"}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvt::collective
