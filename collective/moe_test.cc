#include "collective/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "collective/fp8.h"
#include "collective/in_process_wire.h"
#include "collective/moe_testing.h"
#include "collective/quantizer.h"

namespace kvt::collective {
namespace {

// Runs body(rank, exchange) on one thread per rank over one in-process hub.
void RunRanks(int world, const std::function<void(int, ExpertAllToAll&)>& body) {
  auto hub = std::make_shared<InProcessHub>(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r, wire = hub->Wire(r)]() mutable {
      auto a2a = ExpertAllToAll::Create(std::move(wire));
      ASSERT_TRUE(a2a.ok()) << a2a.status();
      body(r, **a2a);
    });
  }
  for (std::thread& t : threads) t.join();
}

// What rank `src` sends for a token: the token after the mode's encode and decode.
std::vector<float> ThroughTheWire(const float* x, int hidden, const DispatchOptions& options) {
  std::vector<float> y(x, x + hidden);
  if (options.quant == DispatchQuant::kFp8) {
    std::vector<uint8_t> packed(Fp8GroupPackedSize(hidden, options.group_size));
    EXPECT_TRUE(Fp8GroupQuantize(y, options.group_size, absl::MakeSpan(packed)).ok());
    EXPECT_TRUE(Fp8GroupDequantize(packed, options.group_size, absl::MakeSpan(y)).ok());
  } else if (options.quant == DispatchQuant::kInt) {
    auto q = GroupQuantizer::Create(
        {.bits = options.bits, .group_size = options.group_size, .spike_reserve = options.spike_reserve});
    std::vector<uint8_t> packed(q->PackedSize(hidden));
    EXPECT_TRUE(q->Quantize(y, absl::MakeSpan(packed)).ok());
    EXPECT_TRUE(q->Dequantize(packed, absl::MakeSpan(y)).ok());
  }
  return y;
}

// Checks that `got` on rank `me` holds exactly the rows the inputs route there, rank-major, in source order,
// with their slots, weights and tokens as the wire carries them.
void ExpectDispatchedExactly(const std::vector<MoeRankData>& data, int me, const DispatchOptions& options,
                             const DispatchResult& got) {
  const int world = static_cast<int>(data.size());
  const int hidden = data[0].hidden;
  const int topk = data[0].topk;
  const int per_rank = data[0].num_experts / world;
  ASSERT_EQ(got.rank_offsets.size(), world + 1u);
  ASSERT_EQ(got.experts_per_rank, per_rank);
  size_t row = 0;
  for (int src = 0; src < world; ++src) {
    ASSERT_EQ(got.rank_offsets[src], row) << "rank " << me << " from " << src;
    for (size_t t = 0; t < data[src].num_tokens(); ++t) {
      std::vector<int32_t> experts;
      std::vector<float> weights;
      for (int k = 0; k < topk; ++k) {
        const int32_t e = data[src].topk_experts[t * topk + k];
        if (e >= 0 && e / per_rank == me) {
          experts.push_back(e - me * per_rank);
          weights.push_back(data[src].topk_weights[t * topk + k]);
        }
      }
      if (experts.empty()) continue;
      ASSERT_LT(row, got.num_rows());
      EXPECT_EQ(got.source_rank[row], src);
      ASSERT_EQ(got.source_index[row], static_cast<int32_t>(t)) << "rank " << me << " row " << row;
      const size_t begin = got.slot_offsets[row];
      ASSERT_EQ(got.slot_offsets[row + 1] - begin, experts.size());
      for (size_t j = 0; j < experts.size(); ++j) {
        EXPECT_EQ(got.slot_expert[begin + j], experts[j]);
        EXPECT_EQ(got.slot_weight[begin + j], weights[j]);
      }
      const std::vector<float> want = ThroughTheWire(data[src].tokens.data() + t * hidden, hidden, options);
      ASSERT_EQ(std::memcmp(got.tokens.data() + row * hidden, want.data(), hidden * sizeof(float)), 0)
          << "rank " << me << " row " << row;
      ++row;
    }
  }
  EXPECT_EQ(got.rank_offsets[world], row);
  EXPECT_EQ(got.num_rows(), row);
}

// Largest error / bound over the values; fails on any value over its bound.
double ExpectWithinBound(const MoeRankData& data, const DispatchOptions& options,
                         const std::vector<float>& out, const std::string& where) {
  const std::vector<double> exact = ReferenceCombine(data);
  const std::vector<double> bound = CombineErrorBound(data, options);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double error = std::fabs(out[i] - exact[i]);
    EXPECT_LE(error, bound[i]) << where << " value " << i;
    if (error > bound[i]) return 1e9;
    if (bound[i] > 0) worst = std::max(worst, error / bound[i]);
  }
  return worst;
}

struct QuantConfig {
  const char* name;
  DispatchOptions options;
};

const QuantConfig kQuantConfigs[] = {
    {"None", {.quant = DispatchQuant::kNone}},
    {"Fp8", {.quant = DispatchQuant::kFp8}},
    {"Fp8Group32", {.quant = DispatchQuant::kFp8, .group_size = 32}},
    {"Int8", {.quant = DispatchQuant::kInt, .bits = 8}},
    {"Int5", {.quant = DispatchQuant::kInt, .bits = 5, .group_size = 64}},
    {"Int4", {.quant = DispatchQuant::kInt, .bits = 4}},
    {"Int2Spike", {.quant = DispatchQuant::kInt, .bits = 2, .group_size = 32, .spike_reserve = true}},
};

std::vector<MoeRankData> MakeData(int world, uint64_t seed, int hidden = 300, int topk = 6) {
  std::vector<MoeRankData> data;
  for (int r = 0; r < world; ++r) {
    // Different token counts per rank; hidden 300 leaves short groups at the end of every token.
    data.push_back(RandomMoeRankData(23 + 11 * r, hidden, topk, 4 * world, seed * 100 + r));
  }
  return data;
}

class MoeTest : public ::testing::TestWithParam<std::tuple<int, QuantConfig>> {};

TEST_P(MoeTest, DispatchDeliversExactlyTheRoutedTokensAndCombineIsWithinTheStatedBound) {
  const auto [world, config] = GetParam();
  const std::vector<MoeRankData> data = MakeData(world, 1);
  std::vector<double> worst(world, 0);
  RunRanks(world, [&](int r, ExpertAllToAll& a2a) {
    auto dispatched = a2a.Dispatch(data[r].Input(), config.options);
    ASSERT_TRUE(dispatched.ok()) << dispatched.status();
    ExpectDispatchedExactly(data, r, config.options, **dispatched);
    const std::vector<float> expert_out = RunScaleExperts(**dispatched, r);
    std::vector<float> out(data[r].tokens.size(), std::nanf(""));
    ASSERT_TRUE(a2a.Combine(**dispatched, expert_out, absl::MakeSpan(out)).ok());
    worst[r] = ExpectWithinBound(data[r], config.options, out, absl::StrFormat("rank %d", r));
  });
  // The bound is not vacuous: some value uses a good part of it.
  EXPECT_GT(*std::max_element(worst.begin(), worst.end()), 0.05);
}

INSTANTIATE_TEST_SUITE_P(WorldsAndModes, MoeTest,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::ValuesIn(kQuantConfigs)),
                         [](const auto& info) {
                           return absl::StrFormat("World%d%s", std::get<0>(info.param),
                                                  std::get<1>(info.param).name);
                         });

TEST(MoeTest, UnquantizedCombineOfExactlyRepresentableValuesIsExact) {
  // Small integers, power-of-two weights and the stand-in scales keep every fp32 product and sum exact.
  const int world = 3;
  std::vector<MoeRankData> data = MakeData(world, 2, 64, 4);
  for (MoeRankData& d : data) {
    for (float& x : d.tokens) x = std::round(x);
    for (float& w : d.topk_weights) w = w < 0.5f ? 0.25f : 0.5f;
  }
  RunRanks(world, [&](int r, ExpertAllToAll& a2a) {
    auto dispatched = a2a.Dispatch(data[r].Input(), {.quant = DispatchQuant::kNone});
    ASSERT_TRUE(dispatched.ok()) << dispatched.status();
    std::vector<float> out(data[r].tokens.size());
    ASSERT_TRUE(a2a.Combine(**dispatched, RunScaleExperts(**dispatched, r), absl::MakeSpan(out)).ok());
    const std::vector<double> exact = ReferenceCombine(data[r]);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], exact[i]) << "rank " << r << " value " << i;
  });
}

TEST(MoeTest, BackToBackDispatchesKeepTheirOwnBuffersAndBothCombineCorrectly) {
  // Micro-batch pipelining: D0 D1 C0 D2 C1 C2, with no synchronization between calls and different data.
  for (int world : {2, 5}) {
    std::vector<std::vector<MoeRankData>> batches = {MakeData(world, 10), MakeData(world, 11, 128, 2),
                                                     MakeData(world, 12)};
    const DispatchOptions options = {.quant = DispatchQuant::kFp8};
    RunRanks(world, [&](int r, ExpertAllToAll& a2a) {
      std::vector<const DispatchResult*> d(3);
      auto combine_and_check = [&](int b) {
        ExpectDispatchedExactly(batches[b], r, options, *d[b]);
        std::vector<float> out(batches[b][r].tokens.size());
        ASSERT_TRUE(a2a.Combine(*d[b], RunScaleExperts(*d[b], r), absl::MakeSpan(out)).ok());
        ExpectWithinBound(batches[b][r], options, out, absl::StrFormat("batch %d rank %d", b, r));
      };
      for (int b : {0, 1}) {
        auto got = a2a.Dispatch(batches[b][r].Input(), options);
        ASSERT_TRUE(got.ok()) << got.status();
        d[b] = *got;
      }
      EXPECT_NE(d[0], d[1]);
      EXPECT_EQ(d[0]->sequence, 0u);
      EXPECT_EQ(d[1]->sequence, 1u);
      combine_and_check(0);
      auto got = a2a.Dispatch(batches[2][r].Input(), options);
      ASSERT_TRUE(got.ok()) << got.status();
      d[2] = *got;
      combine_and_check(1);
      combine_and_check(2);
    });
  }
}

TEST(MoeTest, TokensRoutedNowhereCombineToZeroAndEmptyRanksWork) {
  const int world = 3;
  std::vector<MoeRankData> data = MakeData(world, 3, 16, 2);
  for (int32_t& e : data[1].topk_experts) e = -1;        // rank 1 routes nothing
  data[2] = RandomMoeRankData(0, 16, 2, 4 * world, 99);  // rank 2 has no tokens
  RunRanks(world, [&](int r, ExpertAllToAll& a2a) {
    auto dispatched = a2a.Dispatch(data[r].Input(), {});
    ASSERT_TRUE(dispatched.ok()) << dispatched.status();
    ExpectDispatchedExactly(data, r, {}, **dispatched);
    std::vector<float> out(data[r].tokens.size(), std::nanf(""));
    ASSERT_TRUE(a2a.Combine(**dispatched, RunScaleExperts(**dispatched, r), absl::MakeSpan(out)).ok());
    if (r == 1) {
      for (float v : out) ASSERT_EQ(v, 0.0f);
    }
    ExpectWithinBound(data[r], {}, out, absl::StrFormat("rank %d", r));
  });
}

TEST(MoeTest, AWorldOfOneDispatchesToItself) {
  const std::vector<MoeRankData> data = MakeData(1, 4, 300, /*topk=*/4);  // 4 experts in all
  RunRanks(1, [&](int r, ExpertAllToAll& a2a) {
    auto dispatched = a2a.Dispatch(data[0].Input(), {.quant = DispatchQuant::kInt, .bits = 6});
    ASSERT_TRUE(dispatched.ok()) << dispatched.status();
    std::vector<float> out(data[0].tokens.size());
    ASSERT_TRUE(a2a.Combine(**dispatched, RunScaleExperts(**dispatched, 0), absl::MakeSpan(out)).ok());
    ExpectWithinBound(data[0], {.quant = DispatchQuant::kInt, .bits = 6}, out, "world 1");
  });
}

TEST(MoeTest, RanksThatDisagreeOnParametersFailWithFailedPrecondition) {
  const int world = 2;
  const std::vector<MoeRankData> data = MakeData(world, 5);
  std::vector<absl::Status> status(world);
  RunRanks(world, [&](int r, ExpertAllToAll& a2a) {
    DispatchOptions options = {.quant = DispatchQuant::kInt, .bits = 4, .timeout = absl::Seconds(5)};
    if (r == 1) options.group_size = 64;  // same sizes on the wire, different codes
    status[r] = a2a.Dispatch(data[r].Input(), options).status();
  });
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(status[r].code(), absl::StatusCode::kFailedPrecondition) << status[r];
}

TEST(MoeTest, BadArgumentsAreRejectedWithInvalidArgument) {
  const std::vector<MoeRankData> data = MakeData(2, 6);
  RunRanks(2, [&](int r, ExpertAllToAll& a2a) {
    if (r != 0) return;  // rank 0 alone: every call fails before touching the wire
    auto expect_invalid = [&](DispatchInput input, DispatchOptions options) {
      EXPECT_EQ(a2a.Dispatch(input, options).status().code(), absl::StatusCode::kInvalidArgument);
    };
    DispatchInput input = data[0].Input();
    input.num_experts = 7;  // not a multiple of 2
    expect_invalid(input, {});
    input = data[0].Input();
    input.tokens = input.tokens.subspan(1);
    expect_invalid(input, {});
    input = data[0].Input();
    input.topk_weights = input.topk_weights.subspan(1);
    expect_invalid(input, {});
    MoeRankData bad = data[0];
    bad.topk_experts[5] = bad.num_experts;
    expect_invalid(bad.Input(), {});
    bad = data[0];
    bad.tokens[17] = std::nanf("");
    expect_invalid(bad.Input(), {});
    expect_invalid(data[0].Input(), {.quant = DispatchQuant::kInt, .bits = 9});
    expect_invalid(data[0].Input(), {.group_size = 0});
    expect_invalid(data[0].Input(), {.timeout = absl::ZeroDuration()});
    DispatchResult foreign;
    std::vector<float> out(data[0].tokens.size());
    EXPECT_EQ(a2a.Combine(foreign, {}, absl::MakeSpan(out)).code(), absl::StatusCode::kInvalidArgument);
  });
}

TEST(MoeTest, ADeadPeerGivesUnavailableAndASilentOneDeadlineExceeded) {
  const std::vector<MoeRankData> data = MakeData(2, 7);
  {
    auto hub = std::make_shared<InProcessHub>(2);
    auto a2a = ExpertAllToAll::Create(hub->Wire(0));
    hub->Kill(1);
    const absl::Time start = absl::Now();
    EXPECT_EQ((*a2a)->Dispatch(data[0].Input(), {.timeout = absl::Seconds(60)}).status().code(),
              absl::StatusCode::kUnavailable);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  {
    auto hub = std::make_shared<InProcessHub>(2);
    auto a2a = ExpertAllToAll::Create(hub->Wire(0));
    auto silent = hub->Wire(1);
    const absl::Time start = absl::Now();
    EXPECT_EQ((*a2a)->Dispatch(data[0].Input(), {.timeout = absl::Milliseconds(300)}).status().code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  }
}

}  // namespace
}  // namespace kvt::collective
