// `kvtctl demo`; see demo_command.h and progressive_demo.h.
#include "tools/kvtctl/demo_command.h"

#include <unistd.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codec/page.h"
#include "nlohmann/json.hpp"
#include "tools/kvtctl/daemon_process.h"
#include "tools/kvtctl/flag_set.h"
#include "tools/kvtctl/progressive_demo.h"
#include "tools/kvtctl/stage_table.h"
#include "tools/kvtctl/timeline_svg.h"

namespace kvt::kvtctl {
namespace {

std::string Ratio(double x, double base) { return base > 0 ? absl::StrFormat("%.2f", x / base) : "-"; }

std::string Percent(const std::optional<double>& x) { return x ? absl::StrFormat("%.0f", 100 * *x) : "-"; }

nlohmann::json ThreadsToJson(const std::vector<transport::ThreadLoad>& loads) {
  nlohmann::json out = nlohmann::json::array();
  for (const transport::ThreadLoad& l : loads) out.push_back({{"name", l.name}, {"utilization", l.utilization}});
  return out;
}

std::string RateName(double rate) { return rate > 0 ? absl::StrFormat("%g", rate) : std::string("unlim."); }

// A stage's figure from a profile, "-" if it did not run.
std::string LastMs(const v1::ProfileResponse& p, absl::string_view stage) {
  const v1::StageTime* t = FindStage(p, stage);
  return t != nullptr ? absl::StrFormat("%.1f", t->last_end_us() / 1e3) : "-";
}
std::string BusyMs(const v1::ProfileResponse& p, absl::string_view stage) {
  const v1::StageTime* t = FindStage(p, stage);
  return t != nullptr ? absl::StrFormat("%.1f", t->busy_us() / 1e3) : "-";
}

// The lynx-vs-int8 verdict at one rate: the ratios, and whether they can be judged.
struct Verdict {
  double rate = 0;
  double anchor = 0, full = 0;  // lynx's times over int8's time to full
  std::string not_judged_because;
};
std::vector<Verdict> Verdicts(const DemoReport& r) {
  std::vector<Verdict> out;
  for (double rate : r.options.rates_gbps) {
    const SchemeRun* int8 = r.Find("int8", rate);
    const SchemeRun* lynx = r.Find("lynx", rate);
    if (int8 == nullptr || lynx == nullptr || int8->full_ms <= 0) continue;
    out.push_back({rate, lynx->anchor_ms / int8->full_ms, lynx->full_ms / int8->full_ms, r.NotLinkBoundBecause(rate)});
  }
  return out;
}

// The page size the daemons used: the one asked for, else kvtd's own choice for these channels.
uint32_t PageTokens(const DemoReport& r) {
  return r.options.page_tokens != 0 ? static_cast<uint32_t>(r.options.page_tokens)
                                    : static_cast<uint32_t>(codec::AutoPageTokens(r.kv_heads * r.head_dim));
}

void PrintTable(const DemoReport& r, std::ostream& out) {
  const DemoOptions& o = r.options;
  std::vector<std::string> rates;
  for (double rate : o.rates_gbps) rates.push_back(rate > 0 ? absl::StrFormat("%g", rate) : "unlimited");
  out << absl::StrFormat(
      "\nkvt demo: %s-shaped synthetic KV, %d tokens x %d layers x %d KV heads x %d dims (%.1f MB as bf16), pages "
      "of %d tokens\n"
      "two kvtd daemons, %s, KV in %s, link rate %s Gbit/s; times from Expect to the decode daemon's events\n\n",
      o.model, o.tokens, r.layers, r.kv_heads, r.head_dim, r.kv_bytes_bf16 / 1e6, PageTokens(r), r.transports,
      o.gpu >= 0 ? absl::StrCat("GPU ", o.gpu, " memory (CUDA IPC, CUDA kernels)") : std::string("shared memory"),
      absl::StrJoin(rates, ", "));
  out << absl::StrFormat("%-7s %-11s %9s %9s %9s %9s %11s %9s %12s %11s %9s %9s %7s\n", "Gbit/s", "scheme", "wire MB",
                         "anchor MB", "anchor ms", "full ms", "anchor/int8", "full/int8", "vNMSE anchor", "vNMSE full",
                         "full/link", "Gbit/s e2e", "steal%");
  for (const SchemeRun& run : r.runs) {
    const SchemeRun* int8 = r.Find("int8", run.rate_gbps);
    const double base = int8 != nullptr ? int8->full_ms : 0;
    out << absl::StrFormat("%-7s %-11s %9.2f %9.2f %9.1f %9.1f %11s %9s %12.3e %11.3e %9s %9.2f %7s\n",
                           RateName(run.rate_gbps), run.scheme, run.wire_bytes / 1e6, run.anchor_bytes / 1e6,
                           run.anchor_ms, run.full_ms, Ratio(run.anchor_ms, base), Ratio(run.full_ms, base),
                           run.vnmse_anchor, run.vnmse_full, Ratio(run.full_ms, DemoReport::IdealMs(run)),
                           run.goodput_gbps(), Percent(run.host_steal));
  }
  for (const SchemeRun& run : r.runs) {
    if (run.verified_identical) {
      out << absl::StrFormat("%-7s %-11s decode blocks bit-identical to the codec's own decode: %s\n",
                             RateName(run.rate_gbps), run.scheme, *run.verified_identical ? "yes" : "NO");
    }
  }
  // Where the time went: when each stage last ran (ms since the request started on its daemon) and how busy it was.
  out << absl::StrFormat("\n%-7s %-11s %8s %8s %8s | %8s %8s %8s %8s %8s | %8s %8s %8s\n", "", "", "prefill:", "", "",
                         "decode:", "", "", "", "", "busy ms:", "", "");
  out << absl::StrFormat("%-7s %-11s %8s %8s %8s | %8s %8s %8s %8s %8s | %8s %8s %8s\n", "Gbit/s", "scheme", "encode",
                         "send", "wait", "rendez.", "anchor", "residual", "dec.anch", "dec.full", "encode", "decode",
                         "queue");
  for (const SchemeRun& run : r.runs) {
    const v1::ProfileResponse& p = run.prefill_profile;
    const v1::ProfileResponse& d = run.decode_profile;
    const v1::StageTime* da = FindStage(d, "decode_anchor");
    const v1::StageTime* df = FindStage(d, "decode_full");
    const double decode_busy = (da ? da->busy_us() : 0) / 1e3 + (df ? df->busy_us() : 0) / 1e3;
    out << absl::StrFormat("%-7s %-11s %8s %8s %8s | %8s %8s %8s %8s %8s | %8s %8.1f %8s\n", RateName(run.rate_gbps),
                           run.scheme, LastMs(p, "encode"), LastMs(p, "send"), BusyMs(p, "staging_wait"),
                           LastMs(d, "rendezvous"), LastMs(d, "arrive_anchor"), LastMs(d, "arrive_residual"),
                           LastMs(d, "decode_anchor"), LastMs(d, "decode_full"), BusyMs(p, "encode"), decode_busy,
                           BusyMs(d, "decode_queue"));
  }
  out << "\nanchor/int8, full/int8: this scheme's time to anchor-ready (all layers) and to full precision, over\n"
         "int8's time to full precision at the same rate. vNMSE: attention-output error (docs/CODEC.md) of what the\n"
         "decode blocks hold, at anchor and at full precision. full/link: the time to full precision over the time\n"
         "the scheme's wire bytes need at the link's rate. Gbit/s e2e: wire bytes over the time to full precision.\n"
         "steal%: the share of the host's CPU time that its hypervisor gave to other machines during the transfer.\n"
         "Stage columns (kvtctl profile): when each stage last ended, in ms since the request started on its\n"
         "daemon (wait: the prefill daemon's time waiting for staging room); busy: summed over threads.\n";
  if (r.data_plane) {
    out << absl::StrFormat(
        "\ndata plane alone (kvtctl bench transport, %s, %d UCX worker(s) a side, %.0f MiB): "
        "%.2f Gbit/s\n",
        r.data_plane->transport, r.data_plane->ucx_workers, r.data_plane->bytes / 1048576.0,
        r.data_plane->goodput_gbps);
    for (const SchemeRun& run : r.runs) {
      if (run.rate_gbps > 0) continue;
      out << absl::StrFormat("  %-11s end to end %.2f Gbit/s = %.2f x the data plane alone\n", run.scheme,
                             run.goodput_gbps(), run.goodput_gbps() / r.data_plane->goodput_gbps);
    }
  }
  for (const Verdict& v : Verdicts(r)) {
    if (v.rate <= 0) {
      out << absl::StrFormat(
          "\nlynx, unlimited rate: time-to-anchor %.2f x int8 time-to-full, time-to-full %.2f x "
          "(no targets without a link rate)\n",
          v.anchor, v.full);
    } else if (v.not_judged_because.empty()) {
      out << absl::StrFormat(
          "\nlynx at %g Gbit/s: time-to-anchor %.2f x int8 time-to-full (target <= 0.60: %s); "
          "time-to-full %.2f x (target <= 1.05: %s)\n",
          v.rate, v.anchor, v.anchor <= 0.60 ? "met" : "MISSED", v.full, v.full <= 1.05 ? "met" : "MISSED");
    } else {
      out << absl::StrFormat(
          "\nlynx at %g Gbit/s: time-to-anchor %.2f x int8 time-to-full, time-to-full %.2f x: NOT JUDGED.\n"
          "  %s: the transfer was not link-bound, which is what the targets are about.\n"
          "  A starved host (high steal %%; the emulated link paces bytes on its CPUs) or a rate above what the\n"
          "  pipeline sustains here does this: run the demo again when the machine is quieter, or at a lower\n"
          "  --rate-gbps.\n",
          v.rate, v.anchor, v.full, v.not_judged_because);
    }
  }
}

nlohmann::json ToJson(const DemoReport& r, const std::string& svg) {
  auto opt = [](const auto& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
  nlohmann::json runs = nlohmann::json::array();
  for (const SchemeRun& run : r.runs) {
    const SchemeRun* int8 = r.Find("int8", run.rate_gbps);
    const double base = int8 != nullptr ? int8->full_ms : 0;
    const double ideal = DemoReport::IdealMs(run);
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerTimes& l : run.timeline.layers) {
      layers.push_back({{"layer", l.layer}, {"anchor_ms", opt(l.anchor_ms)}, {"full_ms", opt(l.full_ms)}});
    }
    nlohmann::json j = {
        {"scheme", run.scheme},
        {"rate_gbps", run.rate_gbps},
        {"wire_bytes", run.wire_bytes},
        {"anchor_bytes", run.anchor_bytes},
        {"anchor_ms", run.anchor_ms},
        {"full_ms", run.full_ms},
        {"anchor_over_int8_full", base > 0 ? nlohmann::json(run.anchor_ms / base) : nlohmann::json(nullptr)},
        {"full_over_int8_full", base > 0 ? nlohmann::json(run.full_ms / base) : nlohmann::json(nullptr)},
        {"goodput_gbps", run.goodput_gbps()},
        {"vnmse_anchor", run.vnmse_anchor},
        {"vnmse_full", run.vnmse_full},
        {"verified_identical", opt(run.verified_identical)},
        {"ideal_full_ms", ideal > 0 ? nlohmann::json(ideal) : nlohmann::json(nullptr)},
        {"host_cpu_steal", opt(run.host_steal)},
        {"host_cpu_busy", opt(run.host_busy)},
        {"host_cpu_ticks", opt(run.host_ticks)},
        {"stages", {{"prefill", StagesToJson(run.prefill_profile)}, {"decode", StagesToJson(run.decode_profile)}}},
        {"busiest_threads",
         {{"prefill", ThreadsToJson(run.prefill_threads)}, {"decode", ThreadsToJson(run.decode_threads)}}},
        {"layers", layers}};
    if (run.rate_gbps == 0 && r.data_plane) {
      j["goodput_over_data_plane"] = run.goodput_gbps() / r.data_plane->goodput_gbps;
    }
    runs.push_back(std::move(j));
  }
  nlohmann::json verdicts = nlohmann::json::array();
  std::vector<std::string> reasons;
  for (const Verdict& v : Verdicts(r)) {
    verdicts.push_back({{"rate_gbps", v.rate},
                        {"lynx_anchor_over_int8_full", v.anchor},
                        {"lynx_full_over_int8_full", v.full},
                        {"judged", v.rate > 0 && v.not_judged_because.empty()},
                        {"not_judged_because", v.not_judged_because}});
    if (!v.not_judged_because.empty())
      reasons.push_back(absl::StrFormat("at %g Gbit/s: %s", v.rate, v.not_judged_because));
  }
  nlohmann::json data_plane = nullptr;
  if (r.data_plane) {
    data_plane = {{"transport", r.data_plane->transport},
                  {"ucx_workers", r.data_plane->ucx_workers},
                  {"chunk_bytes", r.data_plane->chunk_bytes},
                  {"bytes", r.data_plane->bytes},
                  {"goodput_gbps", r.data_plane->goodput_gbps}};
  }
  // With one rate, "not_judged_because" is that rate's reason as it always was; with several, each judged-out
  // rate's reason, prefixed by its rate.
  const std::string why = r.options.rates_gbps.size() == 1 && !verdicts.empty()
                              ? verdicts[0]["not_judged_because"].get<std::string>()
                              : absl::StrJoin(reasons, "; ");
  return {{"model", r.options.model},
          {"tokens", r.options.tokens},
          {"layers", r.layers},
          {"kv_heads", r.kv_heads},
          {"head_dim", r.head_dim},
          {"page_tokens", PageTokens(r)},
          {"kv_bytes_bf16", r.kv_bytes_bf16},
          {"rates_gbps", r.options.rates_gbps},
          {"transport", r.transports},
          {"ucx_workers", r.ucx_workers},
          {"chunk_bytes", ChunkBytes(r.options)},
          {"gpu", r.options.gpu},
          {"timeline_svg", svg},
          {"not_judged_because", why},
          {"verdicts", verdicts},
          {"data_plane", data_plane},
          {"runs", runs}};
}

// "1,10,25,50" -> rates; INVALID_ARGUMENT naming the bad element.
absl::StatusOr<std::vector<double>> ParseRates(const std::string& text) {
  std::vector<double> rates;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double rate = 0;
    if (!absl::SimpleAtod(part, &rate) || !(rate >= 0) || std::isinf(rate)) {
      return absl::InvalidArgumentError(absl::StrCat("--rate-gbps: '", part, "' is not a rate >= 0 in Gbit/s"));
    }
    rates.push_back(rate);
  }
  if (rates.empty()) return absl::InvalidArgumentError("--rate-gbps needs at least one rate (0 = unlimited)");
  return rates;
}

int RunDemo(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "demo";
  FlagSet flags("kvtctl demo");
  DemoOptions o;
  std::string kvtd, schemes = absl::StrJoin(o.schemes, ","), svg = "kvt-demo-timeline.svg", rates = "1";
  double data_plane_mib = static_cast<double>(o.data_plane_bytes >> 20);
  bool json = false;
  flags.String("kvtd", &kvtd, "path of the kvtd binary (default: next to kvtctl, else $PATH)");
  flags.String("model", &o.model, "synthetic KV model preset (llama-3.1-8b, qwen3-32b, smollm2-135m, tiny)");
  flags.Int("tokens", &o.tokens, "context length in tokens");
  flags.Int("layers", &o.layers, "layers to transfer (0 = all of the model's)");
  flags.String("rate-gbps", &rates,
               "data-plane rate limit(s) in Gbit/s, comma-separated to sweep (e.g. 1,10,25,50; 0 = unlimited)");
  flags.String("schemes", &schemes, "comma-separated schemes (int8 is the baseline of the ratios)");
  flags.Int("eval-layers", &o.eval_layers, "layers the attention vNMSE is measured on");
  flags.String("ucx-tls", &o.ucx_tls, "UCX transports of the data plane (tcp, shm, ...)");
  flags.Int("ucx-workers", &o.ucx_workers, "UCX workers per daemon (0 = kvtd's default: a quarter of the cores, 1..4)");
  flags.Int("codec-threads", &o.codec_threads, "codec threads per daemon (0 = one per core)");
  flags.Int("chunk-kib", &o.chunk_kib, "data-plane chunk in KiB, for the daemons and the data plane alone (0 = "
            "kvtd's default, 512; at most 65536)");
  flags.Int("page-tokens", &o.page_tokens,
            "tokens per codec page (0: kvtd's choice; else a multiple of 32): each page's streams are the data "
            "plane's chunks");
  flags.Int("gpu", &o.gpu, "CUDA device for the KV caches (-1 = host shared memory)");
  flags.Bool("verify", &o.verify, "check the decode blocks bit for bit against the codec's own decode");
  flags.Int("warmup-tokens", &o.warmup_tokens,
            "tokens of the untimed int8 transfer first (16: connect only; --tokens: also fill the daemons' buffer "
            "pools, as a daemon serving requests has them)");
  flags.Double("data-plane-mib", &data_plane_mib,
               "with an unlimited rate, MiB the data plane moves alone as the reference (0 = skip)");
  flags.String("svg", &svg, "where to write the timeline SVG (\"\" = nowhere)");
  flags.Bool("json", &json, "print one JSON document instead of the table");
  if (auto exit = ParseCommandLine(flags, args, io, cmd,
                                   "Usage: kvtctl demo [--rate-gbps R[,R...]] [--tokens N] [--schemes a,b] [--json]")) {
    return *exit;
  }
  absl::StatusOr<std::vector<double>> parsed = ParseRates(rates);
  if (!parsed.ok()) return UsageError(io, cmd, std::string(parsed.status().message()), flags.Usage());
  o.rates_gbps = *parsed;
  if (!(data_plane_mib >= 0)) return UsageError(io, cmd, "--data-plane-mib must be >= 0", flags.Usage());
  o.data_plane_bytes = static_cast<uint64_t>(data_plane_mib * 1048576.0);
  o.schemes = absl::StrSplit(schemes, ',', absl::SkipEmpty());
  absl::StatusOr<std::string> path = FindKvtd(kvtd);
  if (!path.ok()) return Failure(io, cmd, path.status());
  o.kvtd = *path;
  const bool tty = !json && isatty(STDERR_FILENO);
  absl::StatusOr<DemoReport> report = RunProgressiveDemo(o, [&](absl::string_view line, bool transient) {
    if (transient && !tty) return;
    io.err << (tty ? "\r\033[K" : "") << line << (transient ? "" : "\n") << std::flush;
  });
  if (tty) io.err << "\r\033[K" << std::flush;
  if (!report.ok()) return Failure(io, cmd, report.status());
  if (!svg.empty()) {
    std::vector<TimelinePanel> panels;
    for (double rate : o.rates_gbps) {
      TimelinePanel panel;
      panel.title = rate > 0 ? absl::StrFormat("link at %g Gbit/s", rate) : "link unlimited";
      for (const SchemeRun& run : report->runs) {
        if (run.rate_gbps == rate) panel.series.push_back(run.timeline);
      }
      panels.push_back(std::move(panel));
    }
    const std::string title =
        absl::StrFormat("kvt demo: per-layer arrival at the decode daemon, %s, %d tokens", o.model, o.tokens);
    if (absl::Status s = WriteTimelinePanelsSvg(svg, panels, title); !s.ok()) return Failure(io, cmd, s);
  }
  if (json) {
    io.out << ToJson(*report, svg).dump(2) << "\n";
  } else {
    PrintTable(*report, io.out);
    if (!svg.empty()) io.out << "timeline: " << svg << "\n";
  }
  return kExitOk;
}

}  // namespace

CommandGroup DemoCommandGroup() {
  return {"demo", "the main job: two kvtd daemons, one progressive KV transfer per scheme, a table and a timeline",
          RunDemo};
}

}  // namespace kvt::kvtctl
