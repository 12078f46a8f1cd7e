// `kvtctl bench`; see bench_command.h.
#include "tools/kvtctl/bench_command.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "tools/kvtctl/flag_set.h"
#include "transport/options.h"

namespace kvt::kvtctl {
namespace {

constexpr char kBenchUsage[] =
    "Usage: kvtctl bench transport [--flags]\n"
    "  the data plane's goodput beside ucx_perftest (same transport and message size, same run), its goodput\n"
    "  under token-bucket rates, and how soon an anchor queued behind a residual completes.\n";

absl::Status Positive(const char* flag, double value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be positive, got ", value));
}

int RunTransport(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "bench transport";
  transport::TransportBenchOptions defaults;
  std::string transports = "tcp,shm", rates = "1,5,10", net_devices = defaults.net_devices, workers = "1";
  std::string perftest = defaults.perftest_program, perftest_test = defaults.perftest_test;
  int chunk_kib = static_cast<int>(defaults.chunk_bytes >> 10);
  int unthrottled_mib = static_cast<int>(defaults.unthrottled_bytes >> 20);
  int anchor_mib = static_cast<int>(defaults.anchor_bytes >> 20);
  int residual_mib = static_cast<int>(defaults.residual_bytes >> 20);
  int perftest_iterations = defaults.perftest_iterations;
  double throttled_seconds = defaults.throttled_seconds;
  bool json = false;
  FlagSet flags("kvtctl bench transport");
  flags.String("transports", &transports, "UCX transports to measure, as UCX_TLS names them, comma-separated");
  flags.String("ucx-workers", &workers,
               "UCX workers per side to measure with, comma-separated (each >1 gets a progress thread of its own)");
  flags.String("net-devices", &net_devices, "UCX_NET_DEVICES for tcp (and ucx_perftest)");
  flags.String("rates-gbps", &rates, "token-bucket rates to measure, Gbit/s, comma-separated");
  flags.Int("chunk-kib", &chunk_kib, "kvt chunk size and ucx_perftest message size, KiB");
  flags.Int("unthrottled-mib", &unthrottled_mib, "MiB moved by the unthrottled run");
  flags.Double("throttled-seconds", &throttled_seconds, "length of each throttled run, seconds");
  flags.Int("anchor-mib", &anchor_mib, "anchor MiB of the anchor-first run");
  flags.Int("residual-mib", &residual_mib, "residual MiB of the anchor-first run");
  flags.String("perftest", &perftest, "the ucx_perftest program");
  flags.String("perftest-test", &perftest_test, "ucx_perftest test");
  flags.Int("perftest-iterations", &perftest_iterations, "ucx_perftest iterations");
  flags.Bool("json", &json, "print one JSON document instead of the tables");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kBenchUsage)) return *exit;
  absl::StatusOr<transport::TransportBenchOptions> options = TransportBenchOptionsFromFlags(
      transports, rates, chunk_kib, unthrottled_mib, throttled_seconds, anchor_mib, residual_mib);
  if (!options.ok()) return UsageError(io, cmd, std::string(options.status().message()), flags.Usage());
  if (perftest_iterations <= 0) return UsageError(io, cmd, "--perftest-iterations must be positive", flags.Usage());
  absl::StatusOr<std::vector<int>> worker_counts = UcxWorkerCountsFromFlag(workers);
  if (!worker_counts.ok()) return UsageError(io, cmd, std::string(worker_counts.status().message()), flags.Usage());
  options->ucx_workers = *worker_counts;
  options->net_devices = net_devices;
  options->perftest_program = perftest;
  options->perftest_test = perftest_test;
  options->perftest_iterations = perftest_iterations;
  if (!json) io.err << "running the transport benchmark (each throttled run lasts " << throttled_seconds << " s)...\n";
  absl::StatusOr<transport::TransportBenchReport> report = transport::RunTransportBench(*options);
  if (!report.ok()) return Failure(io, cmd, report.status());
  io.out << (json ? transport::FormatTransportBenchJson(*report) : transport::FormatTransportBenchTable(*report));
  return kExitOk;
}

int RunBench(const std::vector<std::string>& args, const CommandIo& io) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? io.err : io.out) << kBenchUsage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "transport") return RunTransport(std::vector<std::string>(args.begin() + 1, args.end()), io);
  return UsageError(io, "bench", absl::StrCat("unknown subcommand '", args[0], "'; use transport"), kBenchUsage);
}

}  // namespace

absl::StatusOr<transport::TransportBenchOptions> TransportBenchOptionsFromFlags(
    const std::string& transports, const std::string& rates_gbps, int chunk_kib, int unthrottled_mib,
    double throttled_seconds, int anchor_mib, int residual_mib) {
  transport::TransportBenchOptions o;
  o.transports = absl::StrSplit(transports, ',', absl::SkipEmpty());
  if (o.transports.empty()) return absl::InvalidArgumentError("--transports names no transport");
  o.rates_gbps.clear();
  for (absl::string_view r : absl::StrSplit(rates_gbps, ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(r, &v) || !(v > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("bad --rates-gbps entry '", r, "': a positive number"));
    }
    o.rates_gbps.push_back(v);
  }
  for (auto [flag, value] : {std::pair{"chunk-kib", chunk_kib}, std::pair{"unthrottled-mib", unthrottled_mib},
                             std::pair{"anchor-mib", anchor_mib}, std::pair{"residual-mib", residual_mib}}) {
    if (absl::Status s = Positive(flag, value); !s.ok()) return s;
  }
  if (absl::Status s = Positive("throttled-seconds", throttled_seconds); !s.ok()) return s;
  KVT_ASSIGN_OR_RETURN(o.chunk_bytes, transport::ChunkBytesFromKib(chunk_kib, "--chunk-kib"));
  o.unthrottled_bytes = static_cast<uint64_t>(unthrottled_mib) << 20;
  o.throttled_seconds = throttled_seconds;
  o.anchor_bytes = static_cast<uint64_t>(anchor_mib) << 20;
  o.residual_bytes = static_cast<uint64_t>(residual_mib) << 20;
  return o;
}

absl::StatusOr<std::vector<int>> UcxWorkerCountsFromFlag(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view w : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(w, &v) || v < 1 || v > transport::kMaxUcxWorkers) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --ucx-workers entry '", w, "': a count from 1 to ", transport::kMaxUcxWorkers));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("--ucx-workers names no worker count");
  return out;
}

CommandGroup BenchCommandGroup() {
  return {"bench", "benchmarks: `bench transport` (data plane vs ucx_perftest, rate limiting, anchor first)",
          RunBench};
}

}  // namespace kvt::kvtctl
