// `kvtctl bench transport`: measures the data plane over UCX on this machine and sets it beside ucx_perftest,
// run in the same process tree with the same transport and message size (docs/RESULTS.md: ratios side by
// side). Three figures per UCX transport:
//   1. unthrottled goodput, and its ratio to ucx_perftest's bandwidth (target >= 0.9), twice: streaming from a
//      256 MiB source (what a KV cache looks like: every byte comes from memory, not cache), and resending one
//      chunk-sized source as ucx_perftest resends its one message buffer;
//   2. goodput with the link's token bucket at rate R, and its ratio to R (target >= 0.95);
//   3. at each rate R, with a residual transfer queued and an anchor queued right after it: the anchor's
//      completion time against (anchor bytes / R + one chunk time) x 1.05.
// Runs sender and receiver as two transports in this process (each with its own progress thread) over
// 127.0.0.1. Blocking; call from one thread.
#ifndef KVT_TRANSPORT_BENCH_TRANSPORT_BENCH_H_
#define KVT_TRANSPORT_BENCH_TRANSPORT_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/bench/thread_cpu.h"

namespace kvt::transport {

struct TransportBenchOptions {
  // UCX transports to measure, each as UCX_TLS would name it.
  std::vector<std::string> transports = {"tcp", "shm"};
  // UCX workers per transport (Options::ucx_workers) to measure each transport with; ucx_perftest runs once per
  // transport with its one worker per side.
  std::vector<int> ucx_workers = {1};
  // UCX_NET_DEVICES for the tcp transport (and ucx_perftest).
  std::string net_devices = "lo";
  // Chunk size of kvt and message size of ucx_perftest.
  uint32_t chunk_bytes = 1 << 20;
  // Bytes moved by each of the two unthrottled runs.
  uint64_t unthrottled_bytes = uint64_t{2} << 30;
  // Token-bucket rates to measure, in Gbit/s (1e9 bit/s), and how long each throttled run lasts.
  std::vector<double> rates_gbps = {1, 5, 10};
  double throttled_seconds = 1.0;
  // Anchor-first runs (one per rate): the residual is queued first, the anchor right after.
  uint64_t anchor_bytes = 32 << 20;
  uint64_t residual_bytes = 128 << 20;
  // ucx_perftest: program (looked up in /usr/bin, /usr/local/bin, /bin, /usr/sbin when it has no slash), test
  // and iterations. The default test uses UCP active messages, as kvt does. It runs with peer error handling
  // (`-e`) as kvt's links do, and without it where UCX has none for the transport (shared memory in UCX 1.13),
  // where kvt's link falls back the same way.
  // Whether to measure the one-chunk source too, and to run ucx_perftest (kvtctl demo turns both off: it wants
  // the data plane's streaming goodput alone, as the reference of its end-to-end figure).
  bool one_chunk_source = true;
  bool run_perftest = true;
  std::string perftest_program = "ucx_perftest";
  std::string perftest_test = "ucp_am_bw";
  int perftest_iterations = 2000;
};

struct TransportBenchReport {
  struct Unthrottled {
    std::string transport;
    int workers = 1;  // UCX workers per side
    uint64_t message_bytes = 0;
    uint64_t source_bytes = 0;  // distinct bytes the streams point into (the sender's memory footprint)
    uint64_t bytes = 0;
    double seconds = 0;
    double goodput_gbps = 0;
    bool perftest_ran = false;
    double perftest_gbps = 0;
    double ratio = 0;           // goodput / perftest
    std::string perftest_test;
    bool perftest_error_handling = false;  // ran with `-e`
    std::string perftest_note;  // why perftest did not run, if it was asked for and did not
    // This process's busiest threads during the run, in CPU-seconds per second (near 1.0: saturated).
    std::vector<ThreadLoad> busiest_threads;
  };
  struct Throttled {
    std::string transport;
    int workers = 1;  // UCX workers per side
    double rate_gbps = 0;
    uint64_t bytes = 0;
    double seconds = 0;
    double goodput_gbps = 0;
    double ratio = 0;  // goodput / rate
    // R exceeds what the same transport reached unthrottled in this run: the ratio measures the machine then.
    bool above_unthrottled = false;
  };
  struct AnchorFirst {
    std::string transport;
    int workers = 1;  // UCX workers per side
    double rate_gbps = 0;
    uint64_t anchor_bytes = 0;
    uint64_t residual_bytes = 0;
    double anchor_seconds = 0;    // from the anchor's Send to its last byte at the receiver
    double bound_seconds = 0;     // (anchor bytes / R + one chunk / R) x 1.05
    double residual_seconds = 0;  // from the residual's Send to its last byte
    bool within_bound = false;
  };
  std::string machine;  // host name, CPU count
  std::vector<Unthrottled> unthrottled;
  std::vector<Throttled> throttled;
  std::vector<AnchorFirst> anchor_first;
};

absl::StatusOr<TransportBenchReport> RunTransportBench(const TransportBenchOptions& options);

// The report as aligned text tables, and as one JSON document with the same figures.
std::string FormatTransportBenchTable(const TransportBenchReport& report);
std::string FormatTransportBenchJson(const TransportBenchReport& report);

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_BENCH_TRANSPORT_BENCH_H_
