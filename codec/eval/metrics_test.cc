#include "codec/eval/metrics.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace kvt::codec::eval {
namespace {

std::vector<float> RandomLaplace(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::exponential_distribution<float> e(1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = e(gen) - e(gen);
  return x;
}

TEST(MetricsTest, NmseOfAKnownPerturbation) {
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> y = {1.1f, 1.9f, 3.1f, 3.9f};
  EXPECT_NEAR(Nmse(x, y), 0.04 / 30.0, 1e-8);
  EXPECT_EQ(Nmse(x, x), 0.0);
}

TEST(MetricsTest, NmseAccumulatesOverTensorsAndHandlesZeroReference) {
  NmseAccumulator acc;
  acc.Add(std::vector<float>{3}, std::vector<float>{2});
  acc.Add(std::vector<float>{4}, std::vector<float>{4});
  EXPECT_DOUBLE_EQ(acc.value(), 1.0 / 25.0);
  EXPECT_EQ(Nmse(std::vector<float>{0, 0}, std::vector<float>{0, 0}), 0.0);
  EXPECT_TRUE(std::isinf(Nmse(std::vector<float>{0}, std::vector<float>{1})));
}

TEST(MetricsTest, VnmseIsTheMeanOfPerQueryRatios) {
  // Two queries of head_dim 2: ratios 1/1 and 0/4.
  const std::vector<double> o = {1, 0, 0, 2}, o_hat = {1, 1, 0, 2};
  const MeanAccumulator acc = Vnmse(o, o_hat, 2);
  EXPECT_EQ(acc.count, 2);
  EXPECT_DOUBLE_EQ(acc.mean(), 0.5);
}

TEST(MetricsTest, AttentionMatchesAHandComputedSoftmax) {
  // One head, head_dim 2, two tokens. q = (2, 0): logits = q.k / sqrt(2) = (2/sqrt2, 0) = (sqrt2, 0).
  const HeadLayout l{2, 1, 2, 1};
  const std::vector<float> k = {1, 0, 0, 1};
  const std::vector<float> v = {10, 0, 0, 20};
  QuerySet qs{1, 1, 2, {2.0, 0.0}};
  const std::vector<double> o = AttentionOutputs(k, v, l, qs);
  const double w0 = std::exp(std::sqrt(2.0)), w1 = 1.0;
  EXPECT_NEAR(o[0], 10 * w0 / (w0 + w1), 1e-12);
  EXPECT_NEAR(o[1], 20 * w1 / (w0 + w1), 1e-12);
}

TEST(MetricsTest, SoftmaxIsStableForHugeLogits) {
  const HeadLayout l{3, 1, 1, 1};
  const std::vector<float> k = {1e4f, -1e4f, 9.99e3f};
  const std::vector<float> v = {1, 2, 3};
  QuerySet qs{1, 1, 1, {1e4}};  // logits 1e8, -1e8, 9.99e7: all weight on token 0
  const std::vector<double> o = AttentionOutputs(k, v, l, qs);
  ASSERT_TRUE(std::isfinite(o[0]));
  EXPECT_DOUBLE_EQ(o[0], 1.0);
}

TEST(MetricsTest, GroupedQueryHeadsReadTheirOwnKvHead) {
  // 2 kv heads, 4 query heads: query heads 2 and 3 read kv head 1, whose V is constant 7.
  const HeadLayout l{16, 2, 4, 4};
  std::vector<float> k = RandomLaplace(16 * 8, 1), v = RandomLaplace(16 * 8, 2);
  for (int t = 0; t < 16; ++t) {
    for (int d = 0; d < 4; ++d) v[t * 8 + 4 + d] = 7.0f;
  }
  auto qs = SampleQueries(k, l, QueryOptions{});
  ASSERT_TRUE(qs.ok()) << qs.status();
  const std::vector<double> o = AttentionOutputs(k, v, l, *qs);
  for (int qh = 0; qh < 4; ++qh) {
    for (int i = 0; i < qs->queries_per_head; ++i) {
      const double x = o[(qh * qs->queries_per_head + i) * 4];
      if (qh >= 2) {
        EXPECT_NEAR(x, 7.0, 1e-9);
      } else {
        EXPECT_GT(std::abs(x - 7.0), 1.0);
      }
    }
  }
}

TEST(MetricsTest, SampledQueriesGivePeakedAttention) {
  const HeadLayout l{1024, 2, 64, 8};
  const std::vector<float> k = RandomLaplace(1024 * 128, 3);
  auto qs = SampleQueries(k, l, QueryOptions{.queries_per_head = 16});
  ASSERT_TRUE(qs.ok());
  // The effective number of attended tokens, 1 / sum w^2, for each query.
  double mean_effective = 0;
  int n = 0;
  for (int qh = 0; qh < 8; ++qh) {
    const int h = qh / 4;
    for (int i = 0; i < 16; ++i) {
      const double* q = qs->query(qh, i);
      std::vector<double> w(1024);
      double mx = -1e300, sum = 0, sum2 = 0;
      for (int t = 0; t < 1024; ++t) {
        double s = 0;
        for (int d = 0; d < 64; ++d) s += q[d] * k[t * 128 + h * 64 + d];
        w[t] = s / 8.0;
        mx = std::max(mx, w[t]);
      }
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (double x : w) sum2 += (x / sum) * (x / sum);
      mean_effective += 1.0 / sum2;
      ++n;
    }
  }
  mean_effective /= n;
  EXPECT_LT(mean_effective, 1024 / 8.0) << "attention should concentrate on few tokens";
  EXPECT_GE(mean_effective, 1.0);
}

TEST(MetricsTest, ProbeGivesZeroForIdenticalKvAndGrowsWithNoise) {
  const HeadLayout l{256, 2, 32, 4};
  const std::vector<float> k = RandomLaplace(256 * 64, 4), v = RandomLaplace(256 * 64, 5);
  auto probe = AttentionProbe::Create(k, v, l, QueryOptions{});
  ASSERT_TRUE(probe.ok()) << probe.status();
  auto same = probe->Evaluate(k, v);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->mean(), 0.0);
  EXPECT_EQ(same->count, 4 * 8);
  std::vector<float> k_small = k, k_big = k, v_small = v;
  const std::vector<float> noise = RandomLaplace(k.size(), 6);
  for (size_t i = 0; i < k.size(); ++i) {
    k_small[i] += 0.01f * noise[i];
    v_small[i] += 0.01f * noise[i];
    k_big[i] += 0.3f * noise[i];
  }
  const double small = probe->Evaluate(k_small, v_small)->mean();
  const double big = probe->Evaluate(k_big, v)->mean();
  EXPECT_GT(small, 0.0);
  EXPECT_LT(small, 0.01);
  EXPECT_GT(big, 10 * small);
}

TEST(MetricsTest, BadInputsAreRejected) {
  const std::vector<float> k(64, 1.0f);
  EXPECT_EQ(SampleQueries(k, HeadLayout{16, 2, 2, 3}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleQueries(k, HeadLayout{16, 2, 4, 2}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleQueries(k, HeadLayout{16, 2, 2, 2}, {.queries_per_head = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto probe = AttentionProbe::Create(k, k, HeadLayout{16, 2, 2, 2}, {});
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->Evaluate(std::vector<float>(63), k).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsTest, QueriesAreDeterministicForASeed) {
  const HeadLayout l{64, 1, 8, 2};
  const std::vector<float> k = RandomLaplace(64 * 8, 7);
  EXPECT_EQ(SampleQueries(k, l, {.seed = 3})->q, SampleQueries(k, l, {.seed = 3})->q);
  EXPECT_NE(SampleQueries(k, l, {.seed = 3})->q, SampleQueries(k, l, {.seed = 4})->q);
}

}  // namespace
}  // namespace kvt::codec::eval
