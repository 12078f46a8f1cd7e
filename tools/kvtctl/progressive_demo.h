// The main job (`kvtctl demo`, `./kvt demo`): two kvtd processes on loopback, a synthetic KV cache in shared
// memory on the prefill side, a rate-limited data plane, and one transfer per scheme into the decode side's
// blocks, timed from the decode daemon's events and scored with the attention vNMSE of what landed.
// Not thread-safe (one run at a time).
#ifndef KVT_TOOLS_KVTCTL_PROGRESSIVE_DEMO_H_
#define KVT_TOOLS_KVTCTL_PROGRESSIVE_DEMO_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/kvtctl/timeline_svg.h"

namespace kvt::kvtctl {

struct DemoOptions {
  std::string kvtd;  // path of the kvtd binary
  std::string model = "llama-3.1-8b";
  int tokens = 2048;
  int layers = 0;  // 0 = the model's own layer count
  double rate_gbps = 1.0;
  std::vector<std::string> schemes = {"bf16", "int8", "int4", "lynx"};
  int eval_layers = 4;  // layers the attention vNMSE is measured on, spread over the depth
  int queries = 8;      // queries per head for the vNMSE
  std::string ucx_tls = "tcp";
  int codec_threads = 0;  // per daemon; 0 = one per core
  uint64_t seed = 1;
  int gpu = -1;         // >= 0: the KV caches live on this CUDA device (GPU regions, CUDA kernels in the daemons)
  bool verify = false;  // check the decode blocks against the codec's own decode, bit for bit (eval layers)
};

struct SchemeRun {
  std::string scheme;
  uint64_t anchor_bytes = 0;  // payload bytes on the anchor lane (container headers and metadata included)
  uint64_t wire_bytes = 0;    // every lane
  double anchor_ms = 0;       // from Expect until every layer's anchor is in the decode blocks
  double full_ms = 0;         // ... at full precision
  double vnmse_anchor = 0;
  double vnmse_full = 0;
  std::optional<bool> verified_identical;  // with DemoOptions::verify
  // The host's CPU time during the transfer (host_cpu.h), as fractions of all CPUs' time; unset where the host
  // has no /proc/stat. The link emulation paces bytes on the CPU: much steal means a slower link than asked for.
  std::optional<double> host_steal, host_busy;
  // The /proc/stat clock ticks (all CPUs together) between the two readings those shares come from; unset where
  // there is no /proc/stat. The shares are unset when this is 0: a transfer shorter than the clock's tick (10 ms
  // on Linux) may see none, and a share of nothing is not a measurement.
  std::optional<uint64_t> host_ticks;
  TimelineSeries timeline;
};

struct DemoReport {
  DemoOptions options;
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  uint64_t kv_bytes_bf16 = 0;  // the cache as the engine holds it
  std::string transports;      // what the data plane used
  std::vector<SchemeRun> runs;
  // The run of `scheme`, or null.
  const SchemeRun* Find(absl::string_view scheme) const;
  // The time `run`'s wire bytes take at the link's rate, in ms; 0 for an unlimited link.
  double IdealMs(const SchemeRun& run) const;
  // Why the lynx-vs-int8 targets cannot be judged from this report, "" if they can: the targets are about a
  // link-bound transfer, and int8's run (the ratios' base) took more than kNotLinkBoundOverIdeal x its IdealMs
  // (a starved host or a rate above what this machine's codecs sustain). "" for an unlimited link or no int8 run.
  std::string NotLinkBoundBecause() const;
  // Undisturbed link-bound runs take 1.0-1.1 x their IdealMs (docs/BENCHMARKS.md, the main job).
  static constexpr double kNotLinkBoundOverIdeal = 1.5;
};

using DemoProgress = std::function<void(absl::string_view line, bool transient)>;

// Runs the demo. Errors say which step failed (a daemon's start-up log tail included).
absl::StatusOr<DemoReport> RunProgressiveDemo(const DemoOptions& options, const DemoProgress& progress);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_PROGRESSIVE_DEMO_H_
