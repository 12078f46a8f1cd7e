#include "collective/moe_testing.h"


#include <algorithm>
#include <cmath>
#include <random>

#include "collective/all_reduce_testing.h"
#include "collective/quantizer.h"

namespace kvt::collective {

MoeRankData RandomMoeRankData(size_t num_tokens, int hidden, int topk, int num_experts, uint64_t seed) {
  MoeRankData data;
  data.hidden = hidden;
  data.topk = topk;
  data.num_experts = num_experts;
  data.tokens = RandomWithOutliers(num_tokens * hidden, seed);
  std::mt19937_64 rng(seed ^ 0x5eed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int32_t> experts(num_experts);
  for (size_t t = 0; t < num_tokens; ++t) {
    for (int e = 0; e < num_experts; ++e) experts[e] = e;
    for (int k = 0; k < topk; ++k) {  // a partial Fisher-Yates shuffle: topk distinct experts
      std::swap(experts[k], experts[k + rng() % (num_experts - k)]);
      const bool unused = uniform(rng) < 0.03;
      data.topk_experts.push_back(unused ? -1 : experts[k]);
      data.topk_weights.push_back(static_cast<float>(0.05 + 0.95 * uniform(rng)));
    }
  }
  return data;
}

float ExpertScale(int expert) {
  const float magnitude = 0.5f + 0.125f * (expert % 5);
  return expert % 2 == 0 ? magnitude : -magnitude;
}

std::vector<float> RunScaleExperts(const DispatchResult& dispatched, int rank) {
  const size_t hidden = dispatched.hidden;
  std::vector<float> out(dispatched.num_slots() * hidden);
  for (size_t row = 0; row < dispatched.num_rows(); ++row) {
    for (size_t s = dispatched.slot_offsets[row]; s < dispatched.slot_offsets[row + 1]; ++s) {
      const float scale = ExpertScale(rank * dispatched.experts_per_rank + dispatched.slot_expert[s]);
      for (size_t i = 0; i < hidden; ++i) out[s * hidden + i] = scale * dispatched.tokens[row * hidden + i];
    }
  }
  return out;
}

std::vector<double> ReferenceCombine(const MoeRankData& data) {
  const size_t hidden = data.hidden;
  std::vector<double> out(data.tokens.size(), 0.0);
  for (size_t t = 0; t < data.num_tokens(); ++t) {
    for (int k = 0; k < data.topk; ++k) {
      const int32_t e = data.topk_experts[t * data.topk + k];
      if (e < 0) continue;
      const double ws = static_cast<double>(data.topk_weights[t * data.topk + k]) * ExpertScale(e);
      for (size_t i = 0; i < hidden; ++i) out[t * hidden + i] += ws * data.tokens[t * hidden + i];
    }
  }
  return out;
}

std::vector<double> CombineErrorBound(const MoeRankData& data, const DispatchOptions& options) {
  const size_t hidden = data.hidden;
  const double u = std::ldexp(1.0, -23);
  std::vector<double> bound(data.tokens.size(), 0.0);
  std::vector<double> e_q(hidden);
  for (size_t t = 0; t < data.num_tokens(); ++t) {
    const float* x = data.tokens.data() + t * hidden;
    // The quantization error bound of each value of the token.
    for (size_t g = 0; g < hidden; g += options.group_size) {
      const size_t end = std::min<size_t>(hidden, g + options.group_size);
      double max_abs = 0;
      size_t spike = g;
      for (size_t i = g; i < end; ++i) {
        if (std::fabs(x[i]) > max_abs) {
          max_abs = std::fabs(x[i]);
          spike = i;
        }
      }
      double lo = 0, hi = 0;
      bool any = false;
      for (size_t i = g; i < end; ++i) {
        if (options.spike_reserve && i == spike) continue;
        lo = any ? std::min<double>(lo, x[i]) : x[i];
        hi = any ? std::max<double>(hi, x[i]) : x[i];
        any = true;
      }
      for (size_t i = g; i < end; ++i) {
        const double a = std::fabs(x[i]);
        switch (options.quant) {
          case DispatchQuant::kNone:
            e_q[i] = 0;
            break;
          case DispatchQuant::kFp8: {
            const double scale = max_abs / 448.0 * (1 + std::ldexp(1.0, -22));
            e_q[i] = std::ldexp(a, -4) + std::ldexp(scale, -10) + std::ldexp(a + scale, -21);
            break;
          }
          case DispatchQuant::kInt:
            e_q[i] = (hi - lo) / ((1 << options.bits) - 1) * (0.5 + kQuantizerCodeSlack) + u * max_abs;
            break;
        }
      }
    }
    double weight_sum = 0;
    int used = 0;
    for (int k = 0; k < data.topk; ++k) {
      const int32_t e = data.topk_experts[t * data.topk + k];
      if (e < 0) continue;
      weight_sum += std::fabs(static_cast<double>(data.topk_weights[t * data.topk + k]) * ExpertScale(e));
      ++used;
    }
    for (size_t i = 0; i < hidden; ++i) {
      bound[t * hidden + i] = weight_sum * e_q[i] + (used + 2) * u * weight_sum * (std::fabs(x[i]) + e_q[i]);
    }
  }
  return bound;
}

}  // namespace kvt::collective
