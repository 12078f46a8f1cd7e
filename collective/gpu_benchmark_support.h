// What the GPU collective benchmarks (cuda_collective_benchmark, cuda_moe_benchmark) share: the per-rank check
// macro, the rank's bootstrap (its wire, its GPU, NCCL over the same group when asked), and the header lines
// naming the machine. Test-only.
#ifndef KVT_COLLECTIVE_GPU_BENCHMARK_SUPPORT_H_
#define KVT_COLLECTIVE_GPU_BENCHMARK_SUPPORT_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/multi_process_testing.h"
#include "collective/nccl_library.h"
#include "collective/tcp_wire.h"

// In a rank's body (a ForkedRank named `self` in scope): on error, print it, record it and return 3.
#define BENCH_CHECK(expr)                                                                  \
  do {                                                                                     \
    const absl::Status _s = (expr);                                                        \
    if (!_s.ok()) {                                                                        \
      std::fprintf(stderr, "rank %d: %s: %s\n", self.rank, #expr, _s.ToString().c_str()); \
      self.records.Write(_s, {});                                                          \
      return 3;                                                                            \
    }                                                                                      \
  } while (0)

namespace kvt::collective {

// One benchmark rank's setup: its TcpWire to the others, and NCCL over the same group (both null when no
// library path was given). `library` outlives `comm`.
struct BenchmarkRank {
  std::unique_ptr<TcpWire> wire;
  std::unique_ptr<NcclLibrary> library;
  std::unique_ptr<NcclComm> comm;
};

// Builds the mesh, makes GPU `self.rank` current, and loads NCCL from `nccl_path` unless it is empty. Rank 0
// then prints the device and NCCL lines.
absl::StatusOr<BenchmarkRank> StartBenchmarkRank(ForkedRank& self, int world, const std::string& nccl_path);

// GPUs here, counted in a child; 0 after saying that the benchmark needs GPUs.
int GpusForBenchmark();

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_GPU_BENCHMARK_SUPPORT_H_
