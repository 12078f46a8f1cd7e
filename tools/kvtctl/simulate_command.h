// `kvtctl simulate`: a cluster in virtual time (cluster_sim.h) under one load, for each scheme and lane policy:
// TTFT and time-to-full p50/p99, link utilization; a table, --json, and --svg (the TTFT distributions).
//
//   kvtctl simulate --prefill 2 --decode 2 --rate-gbps 25 --arrivals-per-s 3 --context 2048,4096,8192
#ifndef KVT_TOOLS_KVTCTL_SIMULATE_COMMAND_H_
#define KVT_TOOLS_KVTCTL_SIMULATE_COMMAND_H_

#include <string>
#include <vector>

#include "tools/kvtctl/cluster_sim.h"
#include "tools/kvtctl/command.h"

namespace kvt::kvtctl {

CommandGroup SimulateCommandGroup();

// An SVG 1.1 picture of each run's TTFT distribution (fraction of requests with TTFT <= x).
std::string SimulationSvg(const std::vector<SimResult>& results, const std::string& title);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_SIMULATE_COMMAND_H_
