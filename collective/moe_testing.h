// Test support for Dispatch/Combine: random routed tokens with outliers, a stand-in expert (a per-expert
// scale), the float64 reference of Combine and its stated error bound per quantization mode
// (docs/COLLECTIVES.md).
#ifndef KVT_COLLECTIVE_MOE_TESTING_H_
#define KVT_COLLECTIVE_MOE_TESTING_H_

#include <cstdint>
#include <vector>

#include "collective/moe.h"

namespace kvt::collective {

// One rank's input, owned.
struct MoeRankData {
  std::vector<float> tokens;          // [num_tokens, hidden]
  std::vector<int32_t> topk_experts;  // [num_tokens, topk]
  std::vector<float> topk_weights;    // [num_tokens, topk]
  int hidden = 0;
  int topk = 0;
  int num_experts = 0;

  size_t num_tokens() const { return topk_experts.size() / topk; }
  DispatchInput Input() const { return {tokens, topk_experts, topk_weights, hidden, topk, num_experts}; }
};

// Tokens from RandomWithOutliers (0.1% of values x100); for each token `topk` distinct experts drawn
// uniformly (about 3% of slots left unused as -1), weights uniform in [0.05, 1). Seeded. topk <= num_experts.
MoeRankData RandomMoeRankData(size_t num_tokens, int hidden, int topk, int num_experts, uint64_t seed);

// The stand-in expert: expert e multiplies a token by ExpertScale(e) (one of ±0.5, ±0.625, ..., ±1: dyadic,
// so products with small integers are exact).
float ExpertScale(int expert);

// The expert outputs a rank computes for what it received: per slot, fp32(ExpertScale(global expert) * row).
std::vector<float> RunScaleExperts(const DispatchResult& dispatched, int rank);

// out[t][i] = sum over t's slots of weight * ExpertScale(e) * tokens[t][i], in float64 from the unquantized
// tokens.
std::vector<double> ReferenceCombine(const MoeRankData& data);

// The largest |Combine output - ReferenceCombine| the stated bound allows, per value:
//   sum_j |w_j s_j| E(x) + (k + 2) 2^-23 sum_j |w_j s_j| (|x| + E(x))
// over the token's used slots j (k of them), where E(x) is the quantization error bound of the mode:
//   none: 0;  FP8: 2^-4 |x| + 2^-10 g + 2^-21 (|x| + g), g = max|group| / 448 (1 + 2^-22);
//   int b: range / (2^b - 1) / 2 + 2^-23 max|group| (range without the spike when reserving).
std::vector<double> CombineErrorBound(const MoeRankData& data, const DispatchOptions& options);

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_MOE_TESTING_H_
