// `kvtctl bench ...`: benchmarks that report ratios measured side by side in one run (docs/BENCHMARKS.md).
//   kvtctl bench transport [--transports tcp,shm] [--ucx-workers 1,4] [--rates-gbps 1,5,10] [--json]
// The data plane against ucx_perftest, under token-bucket rates, and anchor-first timing
// (transport/bench/transport_bench.h). Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_BENCH_COMMAND_H_
#define KVT_TOOLS_KVTCTL_BENCH_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/kvtctl/command.h"
#include "transport/bench/transport_bench.h"

namespace kvt::kvtctl {

CommandGroup BenchCommandGroup();

// Maps `kvtctl bench transport` flags to options. INVALID_ARGUMENT for a bad list entry or a non-positive size
// or rate. Exposed for tests.
absl::StatusOr<transport::TransportBenchOptions> TransportBenchOptionsFromFlags(
    const std::string& transports, const std::string& rates_gbps, int chunk_kib, int unthrottled_mib,
    double throttled_seconds, int anchor_mib, int residual_mib);

// Parses --ucx-workers: a comma-separated list of UCX worker counts in [1, 16]. INVALID_ARGUMENT otherwise.
absl::StatusOr<std::vector<int>> UcxWorkerCountsFromFlag(const std::string& list);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_BENCH_COMMAND_H_
