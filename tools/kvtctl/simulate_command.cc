#include "tools/kvtctl/simulate_command.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tools/kvtctl/flag_set.h"

namespace kvt::kvtctl {
namespace {

constexpr char kSimulateUsage[] =
    "Usage: kvtctl simulate [--prefill N] [--decode M] [--rate-gbps R] [--arrivals-per-s A] [--duration-s D]\n"
    "                       [--context 2048,4096,8192] [--model llama-3.1-8b] [--schemes lynx,lynx-no-priority,int8,int4]\n"
    "                       [--json] [--svg FILE]\n"
    "  a cluster of N prefill -> M decode daemons in virtual time: Poisson arrivals, the data plane's own lane\n"
    "  scheduler and pacing on every link, kvtd's page plan for the bytes; TTFT p50/p99 per scheme and policy.\n";

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};

int RunSimulate(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "simulate";
  SimConfig c;
  std::string context = "2048,4096,8192", schemes = "lynx,lynx-no-priority,int8,int4", svg;
  int seed = 1;
  double starvation_ms = absl::ToDoubleMilliseconds(c.starvation_bound);
  int chunk_kib = static_cast<int>(c.chunk_bytes >> 10);
  bool json = false, with_requests = false;
  FlagSet flags("kvtctl simulate");
  flags.Int("prefill", &c.prefill_daemons, "prefill daemons");
  flags.Int("decode", &c.decode_daemons, "decode daemons");
  flags.Double("rate-gbps", &c.rate_gbps, "each prefill -> decode link, Gbit/s (as kvtd --rate_gbps)");
  flags.Double("arrivals-per-s", &c.arrivals_per_s, "requests per second, all together (Poisson)");
  flags.Double("duration-s", &c.duration_s, "seconds of arrivals");
  flags.String("context", &context, "context lengths in tokens, drawn uniformly");
  flags.String("model", &c.model, "KV shape preset (llama-3.1-8b, qwen3-32b, smollm2-135m, tiny)");
  flags.Double("prefill-tokens-per-s", &c.prefill_tokens_per_s, "one prefill daemon's prefill speed");
  flags.String("schemes", &schemes, "runs: lynx (anchor first), lynx-no-priority, int8, int4, bf16, fp8");
  flags.Int("chunk-kib", &chunk_kib, "data-plane chunk (kvtd --chunk_kib)");
  flags.Double("starvation-ms", &starvation_ms, "the lane scheduler's starvation bound");
  flags.Int("seed", &seed, "arrivals seed");
  flags.Bool("json", &json, "print one JSON document instead of the table");
  flags.Bool("with-requests", &with_requests, "with --json: every arrival, and each run's per-request times "
             "(tools/cluster/replay.py replays them on real daemons)");
  flags.String("svg", &svg, "also write the TTFT distributions as an SVG here");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kSimulateUsage)) return *exit;
  c.context_tokens.clear();
  for (absl::string_view part : absl::StrSplit(context, ',', absl::SkipEmpty())) {
    int t = 0;
    if (!absl::SimpleAtoi(part, &t)) return UsageError(io, cmd, absl::StrCat("--context: '", part, "'"), flags.Usage());
    c.context_tokens.push_back(t);
  }
  if (chunk_kib < 1 || chunk_kib > (64 << 10) || !(starvation_ms > 0)) {
    return UsageError(io, cmd, "--chunk-kib must be 1..65536 and --starvation-ms positive", flags.Usage());
  }
  c.chunk_bytes = static_cast<uint32_t>(chunk_kib) << 10;
  c.starvation_bound = absl::Milliseconds(starvation_ms);
  c.seed = static_cast<uint64_t>(seed);
  absl::StatusOr<std::vector<SimArrival>> arrivals = MakeArrivals(c);
  if (!arrivals.ok()) return UsageError(io, cmd, std::string(arrivals.status().message()), flags.Usage());
  std::vector<SimResult> results;
  for (absl::string_view name : absl::StrSplit(schemes, ',', absl::SkipEmpty())) {
    absl::StatusOr<SimRun> run = ParseSimRun(std::string(name));
    if (!run.ok()) return UsageError(io, cmd, std::string(run.status().message()), flags.Usage());
    absl::StatusOr<SimResult> result = Simulate(c, *run, *arrivals);
    if (!result.ok()) return UsageError(io, cmd, std::string(result.status().message()), flags.Usage());
    results.push_back(*std::move(result));
  }
  const std::string title = absl::StrFormat("%d prefill -> %d decode, %g Gbit/s links, %g req/s, %s, %d requests",
                                            c.prefill_daemons, c.decode_daemons, c.rate_gbps, c.arrivals_per_s,
                                            c.model, static_cast<int>(arrivals->size()));
  if (!svg.empty()) {
    std::ofstream f(svg);
    f << SimulationSvg(results, title);
    if (!f) return Failure(io, cmd, absl::UnavailableError(absl::StrCat("cannot write ", svg)));
  }
  if (json) {
    nlohmann::json out = {{"config",
                           {{"prefill", c.prefill_daemons}, {"decode", c.decode_daemons}, {"rate_gbps", c.rate_gbps},
                            {"arrivals_per_s", c.arrivals_per_s}, {"duration_s", c.duration_s},
                            {"context_tokens", c.context_tokens}, {"model", c.model},
                            {"prefill_tokens_per_s", c.prefill_tokens_per_s}, {"seed", seed}}},
                          {"requests", arrivals->size()},
                          {"runs", nlohmann::json::array()}};
    for (const SimResult& r : results) {
      nlohmann::json run = {{"label", r.run.label}, {"scheme", r.run.scheme},
                            {"ttft_p50_ms", r.ttft_p50_s * 1e3}, {"ttft_p99_ms", r.ttft_p99_s * 1e3},
                            {"full_p50_ms", r.full_p50_s * 1e3}, {"full_p99_ms", r.full_p99_s * 1e3},
                            {"link_utilization", r.link_utilization}, {"wire_gb", r.wire_gb},
                            {"makespan_s", r.makespan_s}};
      if (with_requests) {
        run["requests"] = nlohmann::json::array();
        for (const SimRequestResult& q : r.requests) {
          run["requests"].push_back({{"ttft_ms", q.ttft_s * 1e3}, {"full_ms", q.full_s * 1e3}});
        }
      }
      out["runs"].push_back(std::move(run));
    }
    if (with_requests) {
      out["arrivals"] = nlohmann::json::array();
      for (const SimArrival& a : *arrivals) {
        out["arrivals"].push_back({{"at_s", a.at_s}, {"tokens", a.tokens}, {"prefill", a.prefill},
                                   {"decode", a.decode}});
      }
    }
    io.out << out.dump(2) << "\n";
    return kExitOk;
  }
  io.out << title << "\n";
  io.out << absl::StrFormat("%-18s %12s %12s %12s %12s %8s %9s\n", "run", "TTFT p50 ms", "TTFT p99 ms",
                            "full p50 ms", "full p99 ms", "link use", "wire GB");
  for (const SimResult& r : results) {
    io.out << absl::StrFormat("%-18s %12.1f %12.1f %12.1f %12.1f %7.0f%% %9.2f\n", r.run.label, r.ttft_p50_s * 1e3,
                              r.ttft_p99_s * 1e3, r.full_p50_s * 1e3, r.full_p99_s * 1e3,
                              r.link_utilization * 100, r.wire_gb);
  }
  io.out << "TTFT: arrival to every layer usable (lynx: its anchor; others: all of it), prefill included; "
            "decode compute not modelled.\n";
  return kExitOk;
}

}  // namespace

std::string SimulationSvg(const std::vector<SimResult>& results, const std::string& title) {
  constexpr double kW = 720, kH = 420, kL = 60, kR = 170, kT = 40, kB = 50;
  double max_x = 0;
  for (const SimResult& r : results) max_x = std::max(max_x, r.ttft_p99_s * 1.1);
  if (!(max_x > 0)) max_x = 1;
  auto px = [&](double s) { return kL + (kW - kL - kR) * std::min(s, max_x) / max_x; };
  auto py = [&](double f) { return kH - kB - (kH - kT - kB) * f; };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%g\" y=\"22\" font-size=\"14\">TTFT distribution: %s</text>\n",
      kW, kH, kL, title);
  absl::StrAppendFormat(&svg, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", kL, py(0),
                        kW - kR, py(0));
  absl::StrAppendFormat(&svg, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", kL, py(0), kL,
                        py(1));
  for (int i = 0; i <= 4; ++i) {
    absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%.0f</text>\n", px(max_x * i / 4),
                          py(0) + 18, max_x * i / 4 * 1e3);
    absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.2f</text>\n", kL - 6, py(i / 4.0) + 4,
                          i / 4.0);
  }
  absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">TTFT (ms)</text>\n",
                        (kL + kW - kR) / 2, kH - 12);
  for (size_t i = 0; i < results.size(); ++i) {
    std::vector<double> t;
    for (const SimRequestResult& q : results[i].requests) t.push_back(q.ttft_s);
    std::sort(t.begin(), t.end());
    std::string points;
    for (size_t k = 0; k < t.size(); ++k) {
      absl::StrAppendFormat(&points, "%.1f,%.1f %.1f,%.1f ", px(t[k]), py(static_cast<double>(k) / t.size()),
                            px(t[k]), py(static_cast<double>(k + 1) / t.size()));
    }
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    absl::StrAppendFormat(&svg, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n", color,
                          points);
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%g\" y=\"%g\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%g\" y=\"%g\">%s "
                          "(p99 %.0f ms)</text>\n",
                          kW - kR + 12, kT + 20 * i + 4, color, kW - kR + 30, kT + 20 * i + 9,
                          results[i].run.label, results[i].ttft_p99_s * 1e3);
  }
  svg += "</svg>\n";
  return svg;
}

CommandGroup SimulateCommandGroup() {
  return {"simulate", "a cluster of prefill and decode daemons in virtual time: TTFT per scheme under a load",
          RunSimulate};
}

}  // namespace kvt::kvtctl
