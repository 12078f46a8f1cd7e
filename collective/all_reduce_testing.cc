#include "collective/all_reduce_testing.h"


#include <algorithm>
#include <cmath>
#include <random>

#include "collective/all_reduce.h"
#include "collective/quantizer.h"

namespace kvt::collective {
namespace {

struct GroupStats {
  double range = 0;  // without the spike when reserving
  double max_abs = 0;
};

template <typename T>
GroupStats Stats(const T* values, size_t n, bool spike_reserve) {
  size_t spike = n;
  if (spike_reserve) {
    spike = 0;
    for (size_t i = 1; i < n; ++i) {
      if (std::fabs(values[i]) > std::fabs(values[spike])) spike = i;
    }
  }
  GroupStats stats;
  double lo = 0, hi = 0;
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    const double v = values[i];
    stats.max_abs = std::max(stats.max_abs, std::fabs(v));
    if (i == spike) continue;
    lo = any ? std::min(lo, v) : v;
    hi = any ? std::max(hi, v) : v;
    any = true;
  }
  stats.range = hi - lo;
  return stats;
}

}  // namespace

std::vector<float> RandomWithOutliers(size_t n, uint64_t seed, double outliers) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.3, 1.5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<float> x(n);
  for (float& v : x) {
    v = static_cast<float>(normal(rng));
    if (uniform(rng) < outliers) v *= 100.0f;
  }
  return x;
}

std::vector<double> ReferenceSum(const std::vector<std::vector<float>>& inputs) {
  std::vector<double> sum(inputs[0].size(), 0.0);
  for (const auto& x : inputs) {
    for (size_t i = 0; i < x.size(); ++i) sum[i] += x[i];
  }
  return sum;
}

std::vector<double> AllReduceErrorBound(const std::vector<std::vector<float>>& inputs,
                                        const AllReduceOptions& options) {
  const int world = static_cast<int>(inputs.size());
  const size_t total = inputs[0].size();
  const std::vector<double> exact = ReferenceSum(inputs);
  const double u = std::ldexp(1.0, -23);
  std::vector<double> bound(total, 0.0);
  const size_t chunk_values = options.chunk_bytes / sizeof(float);
  for (size_t chunk = 0; chunk < total; chunk += chunk_values) {
    const size_t n = std::min(chunk_values, total - chunk);
    for (int j = 0; j < world; ++j) {
      const ShardRange shard = ShardOf(n, world, j);
      for (size_t g = 0; g < shard.size; g += options.group_size) {
        const size_t begin = chunk + shard.begin + g;
        const size_t len = std::min<size_t>(options.group_size, shard.size - g);
        double e1 = 0, magnitude = 0;
        for (int r = 0; r < world; ++r) {
          const GroupStats x = Stats(inputs[r].data() + begin, len, options.spike_reserve);
          magnitude += x.max_abs;
          if (options.step1_bits != 0) {
            e1 += x.range / ((1 << options.step1_bits) - 1) * (0.5 + kQuantizerCodeSlack) + u * x.max_abs;
          }
        }
        const double accumulate = world * u * (magnitude + e1);
        double e2 = 0;
        if (options.step2_bits != 0) {
          // The reduced group's range may differ from the exact sum's by the error so far, at both ends;
          // which value is its spike is not known here, so the whole range counts.
          const GroupStats s = Stats(exact.data() + begin, len, /*spike_reserve=*/false);
          const double s2 = (s.range + 2 * (e1 + accumulate)) / ((1 << options.step2_bits) - 1);
          e2 = s2 * (0.5 + kQuantizerCodeSlack) + u * (s.max_abs + e1 + accumulate);
        }
        for (size_t i = begin; i < begin + len; ++i) bound[i] = e1 + accumulate + e2;
      }
    }
  }
  return bound;
}

}  // namespace kvt::collective
