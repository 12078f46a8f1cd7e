#include "codec/eval/synthetic_kv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gtest/gtest.h"

namespace kvt::codec::eval {
namespace {

SyntheticKvOptions Llama(int tokens, BulkDistribution bulk = BulkDistribution::kLaplace) {
  auto o = SyntheticKvOptions::ForModel("llama-3.1-8b", tokens);
  EXPECT_TRUE(o.ok());
  o->bulk = bulk;
  return *o;
}

std::vector<double> ChannelRms(const LayerKv& kv, const std::vector<float>& x) {
  std::vector<double> rms(kv.channels, 0.0);
  for (int t = 0; t < kv.tokens; ++t) {
    for (int c = 0; c < kv.channels; ++c) rms[c] += double{x[t * kv.channels + c]} * x[t * kv.channels + c];
  }
  for (double& r : rms) r = std::sqrt(r / kv.tokens);
  return rms;
}

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

TEST(SyntheticKvTest, PresetsHaveTheModelsShapes) {
  auto llama = ModelPreset("llama-3.1-8b");
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(llama->layers, 32);
  EXPECT_EQ(llama->kv_heads, 8);
  EXPECT_EQ(llama->head_dim, 128);
  EXPECT_EQ(llama->query_heads, 32);
  auto qwen = ModelPreset("qwen3-32b");
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(qwen->layers, 64);
  EXPECT_EQ(qwen->channels(), 1024);
  auto bad = ModelPreset("gpt-5");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("llama-3.1-8b"), std::string::npos);
}

TEST(SyntheticKvTest, SameOptionsGiveIdenticalDataAndOtherSeedsOrLayersDiffer) {
  SyntheticKvOptions o = Llama(64);
  const LayerKv a = GenerateLayer(o, 3);
  const LayerKv b = GenerateLayer(o, 3);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.v, b.v);
  EXPECT_NE(GenerateLayer(o, 4).k, a.k);
  o.seed = 2;
  EXPECT_NE(GenerateLayer(o, 3).k, a.k);
}

TEST(SyntheticKvTest, LayoutIsTokenMajorWithAllChannels) {
  const LayerKv kv = GenerateLayer(Llama(40), 0);
  EXPECT_EQ(kv.tokens, 40);
  EXPECT_EQ(kv.channels, 1024);
  EXPECT_EQ(kv.k.size(), 40u * 1024);
  EXPECT_EQ(kv.v.size(), 40u * 1024);
  for (float x : kv.k) ASSERT_TRUE(std::isfinite(x));
}

TEST(SyntheticKvTest, KeyHeadsHaveAFewOutlierChannelsAnOrderOfMagnitudeAboveTheBulk) {
  const SyntheticKvOptions o = Llama(1024);
  const LayerKv kv = GenerateLayer(o, 5);
  const std::vector<double> krms = ChannelRms(kv, kv.k), vrms = ChannelRms(kv, kv.v);
  int k_outliers = 0, v_outliers = 0;
  for (int h = 0; h < o.model.kv_heads; ++h) {
    std::vector<double> kh(krms.begin() + h * 128, krms.begin() + (h + 1) * 128);
    std::vector<double> vh(vrms.begin() + h * 128, vrms.begin() + (h + 1) * 128);
    const double kmed = Median(kh), vmed = Median(vh);
    int head_outliers = 0;
    for (double r : kh) head_outliers += r > 8 * kmed;
    for (double r : vh) v_outliers += r > 8 * vmed;
    EXPECT_GE(head_outliers, 2) << "head " << h;  // at least one pair
    EXPECT_LE(head_outliers, 4) << "head " << h;  // a few, not many
    EXPECT_LT(*std::max_element(kh.begin(), kh.end()), 150 * kmed);
    k_outliers += head_outliers;
  }
  EXPECT_LT(v_outliers, k_outliers) << "outliers are mostly in K";
}

TEST(SyntheticKvTest, KeyChannelPairsRotateWithPositionAtRopeFrequencies) {
  const SyntheticKvOptions o = Llama(2048);
  const LayerKv kv = GenerateLayer(o, 1);
  // Pair i = 1 (frequency base^(-2/128), about 0.81 rad/token) spins: its raw mean over tokens averages out,
  // while the same pair rotated back by -t * freq has the pre-rotary mean.
  const int i = 1, d2 = 64;
  const double freq = std::pow(o.model.rope_base, -2.0 * i / 128);
  double raw = 0, derotated = 0;
  for (int h = 0; h < o.model.kv_heads; ++h) {
    double rx = 0, ry = 0, dx = 0, dy = 0;
    for (int t = 1; t < kv.tokens; ++t) {  // token 0 is a sink
      const double x0 = kv.k[t * 1024 + h * 128 + i], x1 = kv.k[t * 1024 + h * 128 + i + d2];
      const double cs = std::cos(-t * freq), sn = std::sin(-t * freq);
      rx += x0;
      ry += x1;
      dx += x0 * cs - x1 * sn;
      dy += x0 * sn + x1 * cs;
    }
    raw += rx * rx + ry * ry;
    derotated += dx * dx + dy * dy;
  }
  EXPECT_GT(derotated, 20 * raw);
}

TEST(SyntheticKvTest, SinkTokensHaveMuchLargerNorms) {
  const SyntheticKvOptions o = Llama(2048);
  const std::vector<int> sinks = SinkTokens(o);
  ASSERT_GE(sinks.size(), 3u);
  EXPECT_EQ(sinks[0], 0);
  const LayerKv kv = GenerateLayer(o, 2);
  // Norms of the rows centred on the channel means, so that the outlier channels' offsets do not dominate.
  auto row_norms = [&](const std::vector<float>& x) {
    std::vector<double> mean(kv.channels, 0.0);
    for (int t = 0; t < kv.tokens; ++t) {
      for (int c = 0; c < kv.channels; ++c) mean[c] += x[t * kv.channels + c] / double(kv.tokens);
    }
    std::vector<double> n(kv.tokens);
    for (int t = 0; t < kv.tokens; ++t) {
      double s = 0;
      for (int c = 0; c < kv.channels; ++c) s += std::pow(x[t * kv.channels + c] - mean[c], 2);
      n[t] = std::sqrt(s);
    }
    return n;
  };
  const std::vector<double> vn = row_norms(kv.v);
  const double vmed = Median(vn);
  for (int s : sinks) EXPECT_GT(vn[s], 4 * vmed) << "sink " << s;
  const std::vector<double> kn = row_norms(kv.k);
  const double kmed = Median(kn);
  for (int s : sinks) EXPECT_GT(kn[s], 2.5 * kmed) << "sink " << s;
}

// Excess kurtosis and the largest |z| of V's ordinary channels, pooled.
std::pair<double, double> BulkShape(const LayerKv& kv) {
  double m4 = 0, n = 0, zmax = 0;
  for (int c = 0; c < kv.channels; ++c) {
    double mean = 0, var = 0;
    for (int t = 1; t < kv.tokens; ++t) mean += kv.v[t * kv.channels + c];
    mean /= kv.tokens - 1;
    for (int t = 1; t < kv.tokens; ++t) var += std::pow(kv.v[t * kv.channels + c] - mean, 2);
    var /= kv.tokens - 1;
    for (int t = 1; t < kv.tokens; ++t) {
      const double z = (kv.v[t * kv.channels + c] - mean) / std::sqrt(var);
      if (std::abs(z) > 8) continue;  // leave the sinks out
      m4 += z * z * z * z;
      n += 1;
      zmax = std::max(zmax, std::abs(z));
    }
  }
  return {m4 / n - 3.0, zmax};
}

TEST(SyntheticKvTest, BulkIsHeavyTailedAndStudentTIsHeavierThanLaplace) {
  const auto laplace = BulkShape(GenerateLayer(Llama(1024), 0));
  const auto student = BulkShape(GenerateLayer(Llama(1024, BulkDistribution::kStudentT), 0));
  EXPECT_GT(laplace.first, 1.0) << "near-Laplacian bulk: clearly leptokurtic";
  EXPECT_GT(student.first, laplace.first);
}

TEST(SyntheticKvTest, ValuesAreBf16UnlessAskedForFloat32) {
  SyntheticKvOptions o = Llama(32);
  auto low_bits = [](const std::vector<float>& x) {
    int nonzero = 0;
    for (float f : x) {
      uint32_t u;
      std::memcpy(&u, &f, sizeof(u));
      nonzero += (u & 0xFFFFu) != 0;
    }
    return nonzero;
  };
  const LayerKv bf16 = GenerateLayer(o, 0);
  EXPECT_EQ(low_bits(bf16.k), 0);
  EXPECT_EQ(low_bits(bf16.v), 0);
  o.bf16_values = false;
  EXPECT_GT(low_bits(GenerateLayer(o, 0).k), 1000);
}

TEST(SyntheticKvTest, InvalidOptionsAreRejected) {
  SyntheticKvOptions o = Llama(16);
  o.tokens = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = Llama(16);
  o.model.head_dim = 7;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = Llama(16);
  o.model.query_heads = 12;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBulkDistribution("gauss").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseBulkDistribution("student-t"), BulkDistribution::kStudentT);
}

}  // namespace
}  // namespace kvt::codec::eval
