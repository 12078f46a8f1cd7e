#include "collective/nccl_routing.h"

#include <cstddef>

#include "gtest/gtest.h"

namespace kvt::collective {
namespace {

constexpr AllReduceOptions kRaw{.step1_bits = 0, .step2_bits = 0};
constexpr AllReduceOptions kInt4{.step1_bits = 4, .step2_bits = 4};
constexpr size_t kMiB = size_t{1} << 20;

TEST(NcclRouting, WithoutNcclEveryCallRunsKvtsKernels) {
  const NcclRouting routing;
  EXPECT_EQ(ChooseAllReducePath(routing, false, 1, DataType::kBfloat16, kRaw), AllReducePath::kKvt);
  EXPECT_EQ(ChooseAllReducePath(routing, false, 1, DataType::kBfloat16, kInt4), AllReducePath::kKvt);
}

TEST(NcclRouting, DefaultsSendUnquantizedCallsOfEverySizeToNccl) {
  const NcclRouting routing;
  for (size_t count : {size_t{1}, 512 * kMiB, size_t{1} << 40}) {
    EXPECT_EQ(ChooseAllReducePath(routing, true, count, DataType::kBfloat16, kRaw), AllReducePath::kNccl) << count;
  }
}

TEST(NcclRouting, QuantizedCallsSwitchAtTheByteThresholdForEachType) {
  const NcclRouting routing;  // 16 MiB
  // bf16: 8 Mi values are 16 MiB.
  EXPECT_EQ(ChooseAllReducePath(routing, true, 8 * kMiB - 1, DataType::kBfloat16, kInt4), AllReducePath::kNccl);
  EXPECT_EQ(ChooseAllReducePath(routing, true, 8 * kMiB, DataType::kBfloat16, kInt4), AllReducePath::kKvt);
  // fp32: 4 Mi values are 16 MiB.
  EXPECT_EQ(ChooseAllReducePath(routing, true, 4 * kMiB - 1, DataType::kFloat32, kInt4), AllReducePath::kNccl);
  EXPECT_EQ(ChooseAllReducePath(routing, true, 4 * kMiB, DataType::kFloat32, kInt4), AllReducePath::kKvt);
}

TEST(NcclRouting, OneQuantizedStepMakesTheCallQuantized) {
  const NcclRouting routing;
  const AllReduceOptions mixed{.step1_bits = 0, .step2_bits = 8};
  EXPECT_EQ(ChooseAllReducePath(routing, true, 64 * kMiB, DataType::kBfloat16, mixed), AllReducePath::kKvt);
  EXPECT_EQ(ChooseAllReducePath(routing, true, 1024, DataType::kBfloat16, mixed), AllReducePath::kNccl);
}

TEST(NcclRouting, OffAndPartialPoliciesAreHonoured) {
  EXPECT_EQ(ChooseAllReducePath(NcclRouting::Off(), true, 1024, DataType::kBfloat16, kRaw), AllReducePath::kKvt);
  EXPECT_EQ(ChooseAllReducePath(NcclRouting::Off(), true, 1024, DataType::kBfloat16, kInt4), AllReducePath::kKvt);
  const NcclRouting raw_only{.unquantized = true, .quantized_below_bytes = 0};
  EXPECT_EQ(ChooseAllReducePath(raw_only, true, 1, DataType::kFloat16, kInt4), AllReducePath::kKvt);
  EXPECT_EQ(ChooseAllReducePath(raw_only, true, 1, DataType::kFloat16, kRaw), AllReducePath::kNccl);
}

TEST(NcclRouting, DescriptionNamesTheChoices) {
  EXPECT_EQ(DescribeRouting(NcclRouting{}), "unquantized -> NCCL, quantized < 16384 KiB -> NCCL, unchecked");
  EXPECT_EQ(DescribeRouting({.check_finite = true}),
            "unquantized -> NCCL, quantized < 16384 KiB -> NCCL, NCCL output checked for non-finite sums");
  EXPECT_EQ(DescribeRouting(NcclRouting::Off()), "unquantized -> kvt, quantized -> kvt");
}

}  // namespace
}  // namespace kvt::collective
