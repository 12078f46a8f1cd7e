#include "tools/kvtctl/cluster_sim.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

SimConfig OneRequest() {
  SimConfig c;
  c.prefill_daemons = 1;
  c.decode_daemons = 1;
  c.rate_gbps = 10;
  c.context_tokens = {4096};
  c.prefill_tokens_per_s = 1e12;  // every layer ready at once: the link alone decides
  return c;
}

std::vector<SimArrival> At(double t, int tokens) { return {SimArrival{t, tokens, 0, 0}}; }

SimResult Simulated(const SimConfig& c, const std::string& run, const std::vector<SimArrival>& arrivals) {
  absl::StatusOr<SimRun> r = ParseSimRun(run);
  EXPECT_TRUE(r.ok()) << r.status();
  absl::StatusOr<SimResult> result = Simulate(c, *r, arrivals);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

TEST(ClusterSimTest, AloneOnALinkARequestTakesItsBytesAtTheLinkRate) {
  const SimConfig c = OneRequest();
  for (const char* scheme : {"int8", "bf16", "lynx"}) {
    const SimResult r = Simulated(c, scheme, At(1.0, 4096));
    ASSERT_EQ(r.requests.size(), 1u);
    const double wire_s = r.wire_gb * 8 / c.rate_gbps;
    EXPECT_NEAR(r.requests[0].full_s, wire_s, wire_s * 0.01) << scheme;
    EXPECT_NEAR(r.link_utilization, 1.0, 0.02) << scheme;
  }
  // Llama-3.1-8B, 4096 tokens: 32 layers x 4096 x 1024 x 2 values; bf16 is 16 bits a value (plus headers).
  const SimResult bf16 = Simulated(c, "bf16", At(0.5, 4096));
  EXPECT_NEAR(bf16.wire_gb, 32.0 * 4096 * 1024 * 2 * 2 / 1e9, 0.01);
}

TEST(ClusterSimTest, AnchorsFirstMakeTheAnchorArriveAtItsOwnBytesTime) {
  const SimConfig c = OneRequest();
  const SimResult first = Simulated(c, "lynx", At(0, 4096));
  const SimResult one_lane = Simulated(c, "lynx-no-priority", At(0, 4096));
  const SimResult int4 = Simulated(c, "int4", At(0, 4096));
  // Anchors of every layer before any residual: ~4.8 of 8.8 bits, the time int4 needs for its 5.0.
  EXPECT_LT(first.requests[0].ttft_s, 0.6 * first.requests[0].full_s);
  EXPECT_LE(first.requests[0].ttft_s, int4.requests[0].ttft_s);
  // In one lane the last layer's anchor waits for every earlier residual.
  EXPECT_GT(one_lane.requests[0].ttft_s, 0.9 * one_lane.requests[0].full_s);
  EXPECT_NEAR(first.requests[0].full_s, one_lane.requests[0].full_s, 1e-3);
}

TEST(ClusterSimTest, PrefillGatesTheLayersAndQueuesRequestsOnOneDaemon) {
  SimConfig c = OneRequest();
  c.prefill_tokens_per_s = 4096;  // one second a request
  c.rate_gbps = 1000;             // the link is not what decides
  const SimResult r = Simulated(c, "int8", {SimArrival{0, 4096, 0, 0}, SimArrival{0.1, 4096, 0, 0}});
  EXPECT_NEAR(r.requests[0].ttft_s, 1.0, 0.01);
  EXPECT_NEAR(r.requests[1].ttft_s, 1.9, 0.01);  // waits for the first prefill, then its own second
}

TEST(ClusterSimTest, UnderLoadAnchorFirstKeepsTtftTailsShort) {
  SimConfig c;
  c.rate_gbps = 10;
  c.arrivals_per_s = 3;
  c.duration_s = 40;
  auto arrivals = MakeArrivals(c);
  ASSERT_TRUE(arrivals.ok());
  ASSERT_GT(arrivals->size(), 60u);
  const SimResult lynx = Simulated(c, "lynx", *arrivals);
  const SimResult one_lane = Simulated(c, "lynx-no-priority", *arrivals);
  const SimResult int8 = Simulated(c, "int8", *arrivals);
  EXPECT_LT(lynx.ttft_p99_s, one_lane.ttft_p99_s);
  EXPECT_LT(lynx.ttft_p99_s, int8.ttft_p99_s);
  EXPECT_LT(lynx.ttft_p50_s, int8.ttft_p50_s);
  EXPECT_GT(lynx.link_utilization, 0.05);
  EXPECT_LE(lynx.link_utilization, 1.0);
  EXPECT_EQ(lynx.requests.size(), arrivals->size());
}

TEST(ClusterSimTest, ArrivalsAreReproducibleForASeed) {
  SimConfig c;
  auto a = MakeArrivals(c), b = MakeArrivals(c);
  c.seed = 2;
  auto other = MakeArrivals(c);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].at_s, (*b)[i].at_s);
    EXPECT_EQ((*a)[i].tokens, (*b)[i].tokens);
  }
  EXPECT_NE(a->front().at_s, other->front().at_s);
  // ~arrivals_per_s x duration_s of them.
  EXPECT_NEAR(static_cast<double>(a->size()), c.arrivals_per_s * c.duration_s, 4 * std::sqrt(120.0));
}

TEST(ClusterSimTest, BadConfigsAreRefused) {
  SimConfig c;
  c.context_tokens.clear();
  EXPECT_EQ(MakeArrivals(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = SimConfig();
  c.prefill_daemons = 0;
  EXPECT_EQ(MakeArrivals(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = SimConfig();
  c.rate_gbps = 0;
  EXPECT_EQ(Simulate(c, SimRun{"int8", "int8", LanePolicy::kOneLane}, At(0, 64)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseSimRun("lynx-fast").ok());
  c = SimConfig();
  c.model = "gpt-9";
  EXPECT_FALSE(Simulate(c, SimRun{"int8", "int8", LanePolicy::kOneLane}, At(0, 64)).ok());
}

}  // namespace
}  // namespace kvt::kvtctl
