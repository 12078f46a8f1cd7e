// Test support for AllReduce: inputs with outliers, the float64 reference and the stated error bound
// (docs/COLLECTIVES.md) computed per value from the inputs and the chunk/shard/group layout.
#ifndef KVT_COLLECTIVE_ALL_REDUCE_TESTING_H_
#define KVT_COLLECTIVE_ALL_REDUCE_TESTING_H_

#include <cstdint>
#include <vector>

#include "collective/communicator.h"

namespace kvt::collective {

// n values ~ N(0.3, 1.5), of which a fraction `outliers` is multiplied by 100; seeded, so every process that
// asks for (n, seed) gets the same values.
std::vector<float> RandomWithOutliers(size_t n, uint64_t seed, double outliers = 0.001);

// The float64 sum over ranks, value by value.
std::vector<double> ReferenceSum(const std::vector<std::vector<float>>& inputs);

// For each value, the largest |AllReduce output - ReferenceSum| the stated bound allows. Per group (of the
// layout AllReduce uses) with rank inputs x_r and exact sum S:
//   step 1:   E1 = sum_r [ s1_r / 2 + 2^-23 * max|x_r| ],  s1_r = range(x_r) / (2^b1 - 1)  (range without the
//             spike when reserving; E1 = 0 for an fp32 step)
//   fp32 sum: A  = N * 2^-23 * sum_r (max|x_r| + E1)
//   step 2:   E2 = s2 / 2 + 2^-23 * (max|S| + E1 + A),  s2 = (range(S) + 2 (E1 + A)) / (2^b2 - 1)  (E2 = 0
//   fp32) bound = E1 + A + E2.
std::vector<double> AllReduceErrorBound(const std::vector<std::vector<float>>& inputs,
                                        const AllReduceOptions& options);

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_ALL_REDUCE_TESTING_H_
