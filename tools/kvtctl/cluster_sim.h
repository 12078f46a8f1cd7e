// A cluster in virtual time (`kvtctl simulate`): Poisson arrivals of requests over N prefill -> M decode daemons,
// each prefill daemon computing its requests' prefill one at a time (layers ready in turn), each (prefill, decode)
// link sending through the data plane's own LaneScheduler and TokenBucket on a FakeClock, the bytes of every
// layer and stream those of kvtd's own page plan. Compares how a scheme and a lane policy turn a load into TTFT:
// lynx anchor-first, lynx with both streams in one lane (no priority), and the single-stream schemes (FIFO).
// Deterministic for a seed; runs in milliseconds. Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_CLUSTER_SIM_H_
#define KVT_TOOLS_KVTCTL_CLUSTER_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvt::kvtctl {

struct SimConfig {
  int prefill_daemons = 2;
  int decode_daemons = 2;
  double rate_gbps = 25;              // each (prefill, decode) link, as kvtd --rate_gbps
  double arrivals_per_s = 2;          // all requests together, Poisson
  double duration_s = 60;             // arrivals in [0, duration); the run goes on until every request is done
  std::vector<int> context_tokens = {2048, 4096, 8192};  // each request's length, drawn uniformly from these
  std::string model = "llama-3.1-8b";  // codec::eval presets
  double prefill_tokens_per_s = 50000;  // one prefill daemon's compute; layer l is ready after (l + 1) / L of it
  uint32_t chunk_bytes = 512 << 10;
  absl::Duration starvation_bound = absl::Seconds(1);
  uint64_t seed = 1;
};

// How a scheme's streams go on a link: lynx's anchor on lane 0 and residual on lane 1 (kAnchorFirst); every
// stream of a layer on lane 0, in order (kOneLane: lynx without priority, and every single-stream scheme).
enum class LanePolicy { kAnchorFirst, kOneLane };

struct SimRun {
  std::string label;   // "lynx", "lynx-no-priority", "int8", ...
  std::string scheme;  // codec scheme name
  LanePolicy policy = LanePolicy::kAnchorFirst;
};

struct SimArrival {
  double at_s = 0;
  int tokens = 0;
  int prefill = 0;
  int decode = 0;
};

struct SimRequestResult {
  double arrival_s = 0;
  double ttft_s = 0;  // arrival to every layer usable: its anchor (lynx) or all of it (others)
  double full_s = 0;  // arrival to every layer at full precision
};

struct SimResult {
  SimRun run;
  std::vector<SimRequestResult> requests;  // in arrival order
  double ttft_p50_s = 0, ttft_p99_s = 0, full_p50_s = 0, full_p99_s = 0;
  double link_utilization = 0;  // bytes sent / (links x rate x span from the first arrival to the last byte)
  double wire_gb = 0;
  double makespan_s = 0;
};

// The runs `kvtctl simulate --schemes` names: "lynx" (anchor first), "lynx-no-priority", or any single-stream
// scheme ("int8", "int4", "bf16", "fp8"). INVALID_ARGUMENT for anything else.
absl::StatusOr<SimRun> ParseSimRun(const std::string& name);

// The arrivals of `config` (the same for every run, so runs compare on equal load). INVALID_ARGUMENT for a config
// out of range.
absl::StatusOr<std::vector<SimArrival>> MakeArrivals(const SimConfig& config);

absl::StatusOr<SimResult> Simulate(const SimConfig& config, const SimRun& run,
                                   const std::vector<SimArrival>& arrivals);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_CLUSTER_SIM_H_
