#include "collective/nccl_routing.h"

#include "absl/strings/str_cat.h"

namespace kvt::collective {

const char* AllReducePathName(AllReducePath path) { return path == AllReducePath::kNccl ? "nccl" : "kvt"; }

AllReducePath ChooseAllReducePath(const NcclRouting& routing, bool nccl_loaded, size_t count, DataType type,
                                  const AllReduceOptions& options) {
  if (!nccl_loaded) return AllReducePath::kKvt;
  const bool unquantized = options.step1_bits == 0 && options.step2_bits == 0;
  if (unquantized) return routing.unquantized ? AllReducePath::kNccl : AllReducePath::kKvt;
  // Compare in values so that a huge count cannot overflow the byte product.
  const size_t below_values = routing.quantized_below_bytes / numerics::DTypeBytes(type);
  return count < below_values ? AllReducePath::kNccl : AllReducePath::kKvt;
}

std::string DescribeRouting(const NcclRouting& routing) {
  std::string s = routing.unquantized ? "unquantized -> NCCL" : "unquantized -> kvt";
  if (routing.quantized_below_bytes == 0) {
    absl::StrAppend(&s, ", quantized -> kvt");
  } else {
    absl::StrAppend(&s, ", quantized < ", routing.quantized_below_bytes >> 10, " KiB -> NCCL");
  }
  const bool any = routing.unquantized || routing.quantized_below_bytes > 0;
  if (any) absl::StrAppend(&s, routing.check_finite ? ", NCCL output checked for non-finite sums" : ", unchecked");
  return s;
}

}  // namespace kvt::collective
