// AllReduce and Dispatch/Combine across real processes over the UCX wire, once per UCX transport set: the
// test forks one child per rank; each bootstraps a TcpWire mesh on a listener the parent bound to port 0,
// builds UcxWires over it, runs the collectives and writes what it got to a file; the parent checks them.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "collective/all_reduce.h"
#include "collective/all_reduce_testing.h"
#include "collective/moe.h"
#include "collective/moe_testing.h"
#include "collective/multi_process_testing.h"
#include "collective/tcp_wire.h"
#include "collective/ucx_wire.h"

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

// Returns once every rank has called it: a byte to and then from every peer over `wire`.
absl::Status Barrier(CollectiveWire& wire) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  uint8_t byte = 0;
  for (int peer = 0; peer < wire.world_size(); ++peer) {
    if (peer != wire.rank()) KVT_RETURN_IF_ERROR(wire.Send(peer, absl::MakeConstSpan(&byte, 1), deadline));
  }
  for (int peer = 0; peer < wire.world_size(); ++peer) {
    if (peer != wire.rank()) KVT_RETURN_IF_ERROR(wire.Receive(peer, absl::MakeSpan(&byte, 1), deadline));
  }
  return absl::OkStatus();
}

// The body of a child: one record (status, values) per AllReduce config, then per dispatch config two (batch
// 0 and 1). A failure writes its record and stops.
int RunChild(ForkedRank& self, const UcxWireOptions& ucx, ChildRole role) {
  const int rank = self.rank;
  auto bootstrap = TcpWire::Create(
      {.rank = rank, .peers = self.peers, .bootstrap_timeout = absl::Seconds(20)}, std::move(self.listener));
  if (!bootstrap.ok()) return 2;
  auto reduce_wire = UcxWire::Create(ucx, **bootstrap);
  auto moe_wire = UcxWire::Create(ucx, **bootstrap);
  if (!reduce_wire.ok() || !moe_wire.ok()) {
    std::fprintf(stderr, "rank %d: %s %s\n", rank, reduce_wire.status().ToString().c_str(),
                 moe_wire.status().ToString().c_str());
    return 3;
  }
  // Until every rank has its UcxWires a peer may still be connecting to this one: only then may a rank die.
  if (const absl::Status barrier = Barrier(**bootstrap); !barrier.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, barrier.ToString().c_str());
    return 4;
  }
  if (role == ChildRole::kDieAfterBootstrap) _exit(0);  // as if killed
  auto comm = WireCommunicator::Create(std::move(*reduce_wire));
  auto a2a = ExpertAllToAll::Create(std::move(*moe_wire));
  const std::vector<float> in = AllReduceInput(rank);
  for (AllReduceOptions options : AllReduceConfigs()) {
    options.timeout = absl::Seconds(30);
    std::vector<float> out(kValues);
    const absl::Status status = (*comm)->AllReduce(in, absl::MakeSpan(out), options);
    self.records.Write(status, out);
    if (!status.ok()) return 0;
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
      self.records.Write(status, out);
    }
    if (!status.ok()) break;
  }
  return 0;
}

struct Transports {
  const char* name;
  UcxWireOptions options;
};

class UcxCollectiveTest : public ::testing::TestWithParam<Transports> {
 protected:
  // Runs the ranks (roles[r] for rank r) as processes, killing any still running after 90 s, and returns
  // each rank's records.
  std::vector<std::vector<Record>> RunRanks(const std::vector<ChildRole>& roles) {
    ForkedRun run = RunForked(static_cast<int>(roles.size()), absl::Seconds(90), [&](ForkedRank& self) {
      return RunChild(self, GetParam().options, roles[self.rank]);
    });
    for (const absl::Status& exit : run.exits) EXPECT_TRUE(exit.ok()) << exit;
    return std::move(run.records);
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
      ASSERT_EQ(
          std::memcmp(records[r][c].values.data(), records[0][c].values.data(), kValues * sizeof(float)), 0)
          << "AllReduce config " << c << " rank " << r;
    }
    for (size_t i = 0; i < kValues; ++i) {
      ASSERT_LE(std::fabs(records[0][c].values[i] - exact[i]), bound[i])
          << "AllReduce config " << c << " value " << i;
    }
  }
  for (size_t c = 0; c < dispatch_configs.size(); ++c) {
    for (int b = 0; b < 2; ++b) {
      for (int r = 0; r < kWorld; ++r) {
        const MoeRankData data = MoeInput(r, c, b);
        const std::vector<double> want = ReferenceCombine(data);
        const std::vector<double> bound = CombineErrorBound(data, dispatch_configs[c]);
        const std::vector<float>& got = records[r][reduce_configs.size() + 2 * c + b].values;
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
