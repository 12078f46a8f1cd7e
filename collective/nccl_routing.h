// When the CUDA AllReduce hands a call to NCCL instead of running its own kernels (docs/COLLECTIVES.md: "no size
// where the unquantized path loses to NCCL by more than 10% without the module choosing NCCL-like behaviour").
// A pure decision on the call's shape, made identically on every rank (they agree on count, type and options by
// the collectives' contract), so every rank of a call takes the same path.
//
// Why these defaults (docs/BENCHMARKS.md, "Collectives on GPUs", 2 and 4 H200s):
//  - unquantized: kvt's three-kernel push path reaches 0.43-0.69x NCCL's bf16 AllReduce at every size; the
//    quantizing kernels are its reason to exist, and an unquantized sum is what NCCL is built for.
//  - quantized below 16 MiB: every width loses to NCCL there (0.38-0.84x at 1 and 4 MiB: three launches and
//    two cross-GPU barriers against NCCL's 14-40 us), while NCCL's bf16 sum is also the more accurate one.
#ifndef KVT_COLLECTIVE_NCCL_ROUTING_H_
#define KVT_COLLECTIVE_NCCL_ROUTING_H_

#include <cstddef>
#include <string>

#include "collective/communicator.h"
#include "collective/data_type.h"

namespace kvt::collective {

enum class AllReducePath { kKvt, kNccl };

const char* AllReducePathName(AllReducePath path);

struct NcclRouting {
  // Unquantized calls (step1_bits == step2_bits == 0) go to NCCL.
  bool unquantized = true;
  // Quantized calls whose buffer (count x the type's bytes) is smaller than this go to NCCL; 0: none do.
  size_t quantized_below_bytes = size_t{16} << 20;
  // After a call NCCL ran, check its output for non-finite sums (one more kernel, one read of the output) so that
  // a NaN or Inf on any rank is reported by Synchronize on every rank, as kvt's kernels report it. Off (the
  // default): NCCL's behaviour, the NaN is summed into every rank's output and not reported. The check costs
  // about 6% of NCCL's time from 4 MiB up and 3 us at 1 MiB (0.84-0.94x NCCL against 1.00x unchecked, 4 H200s).
  bool check_finite = false;

  // Never NCCL.
  static NcclRouting Off() { return {.unquantized = false, .quantized_below_bytes = 0}; }
};

// The path of one call. `nccl_loaded` false: always kKvt.
AllReducePath ChooseAllReducePath(const NcclRouting& routing, bool nccl_loaded, size_t count, DataType type,
                                  const AllReduceOptions& options);

// "unquantized -> NCCL, quantized < 16 MiB -> NCCL" for logs and benchmark headers.
std::string DescribeRouting(const NcclRouting& routing);

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_NCCL_ROUTING_H_
