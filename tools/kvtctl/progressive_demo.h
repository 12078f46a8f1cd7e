// The main job (`kvtctl demo`, `./kvt demo`): two kvtd processes on loopback, a synthetic KV cache in shared
// memory (or GPU memory) on the prefill side, a rate-limited data plane, and one transfer per scheme and link rate
// into the decode side's blocks, timed from the decode daemon's events, profiled stage by stage on both daemons
// (their Profile RPC) and scored with the attention vNMSE of what landed. With an unlimited rate it also measures
// the data plane alone (the transport bench, same transport and UCX workers) as the reference of the end-to-end
// goodput. Not thread-safe (one run at a time).
#ifndef KVT_TOOLS_KVTCTL_PROGRESSIVE_DEMO_H_
#define KVT_TOOLS_KVTCTL_PROGRESSIVE_DEMO_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/kvt/v1/client.pb.h"
#include "tools/kvtctl/timeline_svg.h"
#include "transport/bench/thread_cpu.h"

namespace kvt::kvtctl {

struct DemoOptions {
  std::string kvtd;  // path of the kvtd binary
  std::string model = "llama-3.1-8b";
  int tokens = 2048;
  int layers = 0;  // 0 = the model's own layer count
  // Link rates to run every scheme at, in Gbit/s; 0 = unlimited. The daemons are restarted for each rate.
  std::vector<double> rates_gbps = {1.0};
  std::vector<std::string> schemes = {"bf16", "int8", "int4", "lynx"};
  int eval_layers = 4;  // layers the attention vNMSE is measured on, spread over the depth
  int queries = 8;      // queries per head for the vNMSE
  std::string ucx_tls = "tcp";
  int ucx_workers = 0;    // per daemon; 0 = kvtd's default (transport::DefaultUcxWorkers)
  int codec_threads = 0;  // per daemon; 0 = one per core
  int chunk_kib = 0;      // data-plane chunk (kvtd --chunk_kib), also the data plane alone's; 0 = kvtd's default
  // Tokens per codec page (kvtd --page_tokens): 0 = kvtd's choice (codec::AutoPageTokens), else a multiple of 32
  // (lynx's 16-token and int8's 32-token chunks both divide it) up to 65536. A page's streams are the data plane's unit, so this sets how many chunks a
  // request is.
  int page_tokens = 0;
  uint64_t seed = 1;
  int gpu = -1;         // >= 0: the KV caches live on this CUDA device (GPU regions, CUDA kernels in the daemons)
  bool verify = false;  // check the decode blocks against the codec's own decode, bit for bit (eval layers)
  // Tokens of the int8 transfer that connects the daemons before the timed runs. The default only connects;
  // `tokens` also warms the daemons' buffer pools to the runs' size, so that the runs see the steady state of a
  // daemon serving requests rather than its first one.
  int warmup_tokens = 16;
  // With an unlimited rate: the bytes the data-plane reference moves (0 = no reference).
  uint64_t data_plane_bytes = uint64_t{1} << 30;
};

struct SchemeRun {
  std::string scheme;
  double rate_gbps = 0;       // the link's rate in this run; 0 = unlimited
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
  // Where the time went on each daemon, stage by stage (the Profile RPC).
  v1::ProfileResponse prefill_profile, decode_profile;
  // Each daemon's busiest threads during the transfer (CPU-seconds per second; near 1.0 = that thread bounds the
  // pipeline), at most kBusiestThreads each; empty where /proc cannot be read.
  std::vector<transport::ThreadLoad> prefill_threads, decode_threads;
  TimelineSeries timeline;

  // Wire bytes over the time to full precision, in Gbit/s.
  double goodput_gbps() const { return full_ms > 0 ? wire_bytes * 8.0 / (full_ms * 1e6) : 0; }
};

// The data plane alone (`kvtctl bench transport`, streaming source), measured in the same run with the
// daemons' transport and UCX workers, as the ceiling of the end-to-end goodput.
struct DataPlaneReference {
  std::string transport;
  int ucx_workers = 0;
  uint32_t chunk_bytes = 0;
  uint64_t bytes = 0;
  double goodput_gbps = 0;
};

struct DemoReport {
  DemoOptions options;
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int ucx_workers = 0;         // what the daemons used
  uint64_t kv_bytes_bf16 = 0;  // the cache as the engine holds it
  std::string transports;      // what the data plane used
  std::vector<SchemeRun> runs;  // rate by rate, scheme by scheme
  std::optional<DataPlaneReference> data_plane;
  // The run of `scheme` at `rate_gbps`, or null.
  const SchemeRun* Find(absl::string_view scheme, double rate_gbps) const;
  // The time `run`'s wire bytes take at its link's rate, in ms; 0 for an unlimited link.
  static double IdealMs(const SchemeRun& run);
  // Why the lynx-vs-int8 targets cannot be judged at `rate_gbps`, "" if they can: the targets are about a
  // link-bound transfer, and int8's run (the ratios' base) took more than kNotLinkBoundOverIdeal x its IdealMs
  // (a starved host or a rate above what this machine's pipeline sustains). "" for an unlimited link or no int8
  // run.
  std::string NotLinkBoundBecause(double rate_gbps) const;
  // Undisturbed link-bound runs take 1.0-1.1 x their IdealMs (docs/BENCHMARKS.md, the main job).
  static constexpr double kNotLinkBoundOverIdeal = 1.5;
};

using DemoProgress = std::function<void(absl::string_view line, bool transient)>;

// Runs the demo. Errors say which step failed (a daemon's start-up log tail included).
absl::StatusOr<DemoReport> RunProgressiveDemo(const DemoOptions& options, const DemoProgress& progress);

// The data plane's chunk the demo's daemons use: --chunk-kib, else kvtd's default.
uint32_t ChunkBytes(const DemoOptions& o);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_PROGRESSIVE_DEMO_H_
