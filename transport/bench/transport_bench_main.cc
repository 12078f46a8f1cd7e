// Standalone `kvtctl bench transport`: prints the transport benchmark as tables, or with --json as one JSON
// document. Example: kvt_transport_bench --transports=tcp,shm --rates_gbps=1,5,10
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "transport/bench/transport_bench.h"

ABSL_FLAG(std::string, transports, "tcp,shm", "UCX transports to measure, as UCX_TLS names them, comma-separated");
ABSL_FLAG(std::string, net_devices, "lo", "UCX_NET_DEVICES for tcp (and ucx_perftest)");
ABSL_FLAG(std::string, rates_gbps, "1,5,10", "token-bucket rates to measure, Gbit/s, comma-separated");
ABSL_FLAG(int, chunk_kib, 1024, "kvt chunk size and ucx_perftest message size, KiB");
ABSL_FLAG(int, unthrottled_mib, 2048, "MiB moved by the unthrottled run");
ABSL_FLAG(double, throttled_seconds, 1.0, "length of each throttled run, seconds");
ABSL_FLAG(int, anchor_mib, 32, "anchor MiB of the anchor-first run");
ABSL_FLAG(int, residual_mib, 128, "residual MiB of the anchor-first run");
ABSL_FLAG(std::string, perftest, "ucx_perftest", "ucx_perftest program");
ABSL_FLAG(std::string, perftest_test, "tag_bw", "ucx_perftest test");
ABSL_FLAG(int, perftest_iterations, 2000, "ucx_perftest iterations");
ABSL_FLAG(bool, json, false, "print one JSON document instead of tables");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  kvt::transport::TransportBenchOptions o;
  o.transports = absl::StrSplit(absl::GetFlag(FLAGS_transports), ',', absl::SkipEmpty());
  o.net_devices = absl::GetFlag(FLAGS_net_devices);
  o.rates_gbps.clear();
  for (absl::string_view r : absl::StrSplit(absl::GetFlag(FLAGS_rates_gbps), ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(r, &v) || v <= 0) {
      std::fprintf(stderr, "bad --rates_gbps entry \"%s\"\n", std::string(r).c_str());
      return 2;
    }
    o.rates_gbps.push_back(v);
  }
  o.chunk_bytes = static_cast<uint32_t>(absl::GetFlag(FLAGS_chunk_kib)) << 10;
  o.unthrottled_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_unthrottled_mib)) << 20;
  o.throttled_seconds = absl::GetFlag(FLAGS_throttled_seconds);
  o.anchor_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_anchor_mib)) << 20;
  o.residual_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_residual_mib)) << 20;
  o.perftest_program = absl::GetFlag(FLAGS_perftest);
  o.perftest_test = absl::GetFlag(FLAGS_perftest_test);
  o.perftest_iterations = absl::GetFlag(FLAGS_perftest_iterations);
  auto report = kvt::transport::RunTransportBench(o);
  if (!report.ok()) {
    std::fprintf(stderr, "transport bench failed: %s\n", report.status().ToString().c_str());
    return 1;
  }
  const std::string text = absl::GetFlag(FLAGS_json) ? kvt::transport::FormatTransportBenchJson(*report)
                                                     : kvt::transport::FormatTransportBenchTable(*report);
  std::fputs(text.c_str(), stdout);
  return 0;
}
