// Runs ucx_perftest (server and client on 127.0.0.1) as child processes and reads its bandwidth, so the
// transport benchmark can compare against it in the same run. Blocking; thread-compatible.
#ifndef KVT_TRANSPORT_BENCH_PERFTEST_RUNNER_H_
#define KVT_TRANSPORT_BENCH_PERFTEST_RUNNER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvt::transport {

struct PerftestRun {
  std::string program = "ucx_perftest";
  // ucp_am_bw: UCP active messages, the API kvt's wire uses (tag_bw measures tag matching instead).
  std::string test = "ucp_am_bw";
  // Endpoints with peer error handling (`-e`), as kvt's links ask for: over tcp it rules out UCX's zero-copy
  // rendezvous (which needs memory invalidation), so the receiver copies each payload once more.
  bool error_handling = false;
  std::string tls = "tcp";         // UCX_TLS of both children
  std::string net_devices = "lo";  // UCX_NET_DEVICES of both children
  uint64_t message_bytes = 1 << 20;
  int iterations = 2000;
  absl::Duration timeout = absl::Seconds(120);
};

// Returns the overall bandwidth of the client's "Final:" line, in bytes/s. NOT_FOUND if the program is not
// installed; DEADLINE_EXCEEDED past `timeout` (children are killed); INTERNAL if its output cannot be read.
absl::StatusOr<double> RunUcxPerftest(const PerftestRun& run);

// Parses ucx_perftest's output; exposed for tests. Bandwidth is in MB/s of 2^20 bytes.
absl::StatusOr<double> ParsePerftestBandwidth(const std::string& output);

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_BENCH_PERFTEST_RUNNER_H_
