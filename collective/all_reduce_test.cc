#include "collective/all_reduce.h"

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "collective/all_reduce_testing.h"
#include "collective/in_process_wire.h"

namespace kvt::collective {
namespace {

struct RunResult {
  std::vector<absl::Status> status;
  std::vector<std::vector<float>> out;
};

// Runs one AllReduce per rank, each on its own thread over one hub; options_of(rank) gives each rank's
// options.
template <typename OptionsOf>
RunResult RunAllReduce(const std::vector<std::vector<float>>& inputs, OptionsOf options_of) {
  const int world = static_cast<int>(inputs.size());
  auto hub = std::make_shared<InProcessHub>(world);
  RunResult result{std::vector<absl::Status>(world), std::vector<std::vector<float>>(world)};
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r, wire = hub->Wire(r)]() mutable {
      auto comm = WireCommunicator::Create(std::move(wire));
      result.out[r].assign(inputs[r].size(), std::nanf(""));
      result.status[r] = (*comm)->AllReduce(inputs[r], absl::MakeSpan(result.out[r]), options_of(r));
    });
  }
  for (std::thread& t : threads) t.join();
  return result;
}

RunResult RunAllReduce(const std::vector<std::vector<float>>& inputs, const AllReduceOptions& options) {
  return RunAllReduce(inputs, [&](int) { return options; });
}

std::vector<std::vector<float>> Inputs(int world, size_t n, uint64_t seed) {
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(RandomWithOutliers(n, seed * 1000 + r));
  return inputs;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct WidthConfig {
  const char* name;
  int step1_bits;
  int step2_bits;
  bool spike_reserve;
  int group_size;
};

const WidthConfig kConfigs[] = {
    {"Int8", 8, 8, false, 128},        {"Int6", 6, 6, false, 128},         {"Int5", 5, 5, false, 128},
    {"Int4", 4, 4, false, 128},        {"Int3", 3, 3, false, 64},          {"Int2", 2, 2, false, 32},
    {"Int2Spike", 2, 2, true, 32},     {"Int4Then8", 4, 8, false, 128},    {"Int7Spike", 7, 7, true, 100},
    {"Unquantized", 0, 0, false, 128}, {"Int4ThenFp32", 4, 0, false, 128},
};

class AllReduceTest : public ::testing::TestWithParam<std::tuple<int, WidthConfig>> {};

TEST_P(AllReduceTest, ResultsAreBitwiseIdenticalOnEveryRankAndWithinTheStatedBound) {
  const auto [world, config] = GetParam();
  AllReduceOptions options;
  options.step1_bits = config.step1_bits;
  options.step2_bits = config.step2_bits;
  options.spike_reserve = config.spike_reserve;
  options.group_size = config.group_size;
  // Three chunks, the last one short; shards that do not divide evenly; groups cut short at shard ends.
  const size_t n = 10007;
  options.chunk_bytes = 4 * 4001;
  const auto inputs = Inputs(world, n, world * 100 + config.step1_bits * 10 + config.step2_bits);
  const RunResult result = RunAllReduce(inputs, options);
  for (int r = 0; r < world; ++r)
    ASSERT_TRUE(result.status[r].ok()) << "rank " << r << ": " << result.status[r];
  for (int r = 1; r < world; ++r) EXPECT_TRUE(BitwiseEqual(result.out[r], result.out[0])) << "rank " << r;

  const std::vector<double> exact = ReferenceSum(inputs);
  const std::vector<double> bound = AllReduceErrorBound(inputs, options);
  double worst = 0;  // the largest error as a fraction of its bound
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(result.out[0][i] - exact[i]);
    ASSERT_LE(err, bound[i]) << "value " << i << " out " << result.out[0][i] << " exact " << exact[i];
    worst = std::max(worst, err / bound[i]);
  }
  // The bound is not vacuous: some value comes within a fair part of it.
  EXPECT_GT(worst, 0.1);
}

INSTANTIATE_TEST_SUITE_P(WorldsAndWidths, AllReduceTest,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 7, 8),
                                            ::testing::ValuesIn(kConfigs)),
                         [](const auto& info) {
                           return absl::StrFormat("World%d%s", std::get<0>(info.param),
                                                  std::get<1>(info.param).name);
                         });

TEST(AllReduceTest, UnquantizedSumOfSmallIntegersIsExact) {
  std::vector<std::vector<float>> inputs(5, std::vector<float>(1001));
  for (int r = 0; r < 5; ++r) {
    for (size_t i = 0; i < 1001; ++i)
      inputs[r][i] = static_cast<float>((static_cast<int>(i * 7 + r * 13) % 201) - 100);
  }
  const RunResult result = RunAllReduce(inputs, AllReduceOptions{.step1_bits = 0, .step2_bits = 0});
  const std::vector<double> exact = ReferenceSum(inputs);
  for (int r = 0; r < 5; ++r) {
    ASSERT_TRUE(result.status[r].ok()) << result.status[r];
    for (size_t i = 0; i < exact.size(); ++i)
      ASSERT_EQ(result.out[r][i], exact[i]) << "rank " << r << " " << i;
  }
}

TEST(AllReduceTest, SpikeReservingLowersTheErrorOnDataWithOutliers) {
  const auto inputs = Inputs(4, 20000, 7);
  const std::vector<double> exact = ReferenceSum(inputs);
  auto mean_error = [&](bool spike) {
    const RunResult result =
        RunAllReduce(inputs, AllReduceOptions{.step1_bits = 3, .step2_bits = 3, .spike_reserve = spike});
    double total = 0;
    for (size_t i = 0; i < exact.size(); ++i) total += std::fabs(result.out[0][i] - exact[i]);
    return total / exact.size();
  };
  const double plain = mean_error(false);
  const double spiky = mean_error(true);
  EXPECT_LT(spiky, 0.9 * plain) << "plain " << plain << " spike " << spiky;
}

TEST(AllReduceTest, WiderStepsGiveSmallerErrors) {
  const auto inputs = Inputs(3, 8000, 11);
  const std::vector<double> exact = ReferenceSum(inputs);
  double previous = INFINITY;
  for (int bits : {2, 4, 6, 8}) {
    const RunResult result = RunAllReduce(inputs, AllReduceOptions{.step1_bits = bits, .step2_bits = bits});
    ASSERT_TRUE(result.status[0].ok());
    double worst = 0;
    for (size_t i = 0; i < exact.size(); ++i) worst = std::max(worst, std::fabs(result.out[0][i] - exact[i]));
    EXPECT_LT(worst, previous) << bits;
    previous = worst;
  }
}

TEST(AllReduceTest, InPlaceGivesTheSameResultAsOutOfPlace) {
  const auto inputs = Inputs(3, 5000, 5);
  const AllReduceOptions options{.step1_bits = 4, .step2_bits = 8, .chunk_bytes = 4 * 1000};
  const RunResult reference = RunAllReduce(inputs, options);
  auto hub = std::make_shared<InProcessHub>(3);
  std::vector<std::vector<float>> buffers = inputs;
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r, wire = hub->Wire(r)]() mutable {
      auto comm = WireCommunicator::Create(std::move(wire));
      status[r] = (*comm)->AllReduce(buffers[r], absl::MakeSpan(buffers[r]), options);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_TRUE(BitwiseEqual(buffers[r], reference.out[0])) << r;
  }
}

TEST(AllReduceTest, RepeatedCallsOnOneCommunicatorStayInStep) {
  auto hub = std::make_shared<InProcessHub>(2);
  std::vector<absl::Status> status(2);
  std::vector<std::vector<float>> out(2, std::vector<float>(300));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r, wire = hub->Wire(r)]() mutable {
      auto comm = WireCommunicator::Create(std::move(wire));
      for (int call = 0; call < 5 && status[r].ok(); ++call) {
        const std::vector<float> in(300, static_cast<float>(call + r));
        status[r] = (*comm)->AllReduce(in, absl::MakeSpan(out[r]), AllReduceOptions{});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(out[r], std::vector<float>(300, 9.0f));  // 4 + 5: constant groups are exact
  }
}

TEST(AllReduceTest, RanksThatDisagreeOnTheCallFailWithFailedPrecondition) {
  const auto inputs = Inputs(2, 1000, 3);
  // Same message sizes, different options: only the tag tells them apart.
  const RunResult result = RunAllReduce(inputs, [](int rank) {
    return AllReduceOptions{.chunk_bytes = rank == 0 ? size_t{1} << 20 : size_t{1} << 21};
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(result.status[r].code(), absl::StatusCode::kFailedPrecondition) << r;
}

TEST(AllReduceTest, RanksThatDisagreeOnTheSizeFailWithInvalidArgument) {
  std::vector<std::vector<float>> inputs = {std::vector<float>(1000, 1.0f), std::vector<float>(1002, 1.0f)};
  const RunResult result = RunAllReduce(inputs, AllReduceOptions{});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(result.status[r].code(), absl::StatusCode::kInvalidArgument) << r;
}

TEST(AllReduceTest, DeadRankMakesTheOthersFailWithUnavailableWithoutWaitingForTheTimeout) {
  auto hub = std::make_shared<InProcessHub>(3);
  hub->Kill(2);
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r, wire = hub->Wire(r)]() mutable {
      auto comm = WireCommunicator::Create(std::move(wire));
      std::vector<float> data(1000, 1.0f);
      status[r] =
          (*comm)->AllReduce(data, absl::MakeSpan(data), AllReduceOptions{.timeout = absl::Seconds(60)});
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(status[r].code(), absl::StatusCode::kUnavailable) << status[r];
}

TEST(AllReduceTest, SilentRankMakesTheOthersFailWithDeadlineExceeded) {
  auto hub = std::make_shared<InProcessHub>(3);
  std::unique_ptr<CollectiveWire> silent = hub->Wire(2);  // never calls AllReduce
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r, wire = hub->Wire(r)]() mutable {
      auto comm = WireCommunicator::Create(std::move(wire));
      std::vector<float> data(1000, 1.0f);
      status[r] = (*comm)->AllReduce(data, absl::MakeSpan(data),
                                     AllReduceOptions{.timeout = absl::Milliseconds(300)});
    });
  }
  for (std::thread& t : threads) t.join();
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, absl::Milliseconds(300));
  EXPECT_LT(elapsed, absl::Seconds(5));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(status[r].code(), absl::StatusCode::kDeadlineExceeded) << status[r];
}

TEST(AllReduceTest, BadArgumentsAreRejectedWithInvalidArgument) {
  auto hub = std::make_shared<InProcessHub>(1);
  auto comm = WireCommunicator::Create(hub->Wire(0));
  ASSERT_TRUE(comm.ok());
  std::vector<float> in(100, 1.0f), out(100);
  EXPECT_EQ((*comm)->AllReduce(in, absl::MakeSpan(out), {.step1_bits = 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->AllReduce(in, absl::MakeSpan(out), {.step2_bits = 9}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->AllReduce(in, absl::MakeSpan(out), {.group_size = 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->AllReduce(in, absl::MakeSpan(out), {.chunk_bytes = 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->AllReduce(in, absl::MakeSpan(out).subspan(1), {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)
                ->AllReduce(absl::MakeConstSpan(in).subspan(0, 50), absl::MakeSpan(in).subspan(10, 50), {})
                .code(),
            absl::StatusCode::kInvalidArgument);
  in[42] = std::nanf("");
  EXPECT_EQ((*comm)->AllReduce(in, absl::MakeSpan(out), {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WireCommunicator::Create(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AllReduceTest, EmptyInputAndSingleRankWork) {
  auto hub = std::make_shared<InProcessHub>(1);
  auto comm = WireCommunicator::Create(hub->Wire(0));
  std::vector<float> none;
  EXPECT_TRUE((*comm)->AllReduce(none, absl::MakeSpan(none), {}).ok());
  const std::vector<float> in = {1.0f, 2.0f, 3.0f, 4.0f};  // evenly spaced: exact at 8 bits
  std::vector<float> out(4);
  ASSERT_TRUE((*comm)->AllReduce(in, absl::MakeSpan(out), {}).ok());
  EXPECT_EQ(out, in);
}

TEST(ShardOfTest, ShardsCoverTheChunkWithTheRemainderUpFront) {
  EXPECT_EQ(ShardOf(10, 3, 0).begin, 0u);
  EXPECT_EQ(ShardOf(10, 3, 0).size, 4u);
  EXPECT_EQ(ShardOf(10, 3, 1).begin, 4u);
  EXPECT_EQ(ShardOf(10, 3, 1).size, 3u);
  EXPECT_EQ(ShardOf(10, 3, 2).begin, 7u);
  EXPECT_EQ(ShardOf(10, 3, 2).size, 3u);
  EXPECT_EQ(ShardOf(2, 4, 3).size, 0u);
  EXPECT_EQ(ShardOf(2, 4, 3).begin, 2u);
}

}  // namespace
}  // namespace kvt::collective
