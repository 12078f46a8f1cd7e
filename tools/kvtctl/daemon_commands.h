// `kvtctl stats`, `kvtctl watch`, `kvtctl timeline` and `kvtctl profile`: what a running kvtd says about itself and its
// requests, asked through its client socket (kvt::Client). Each command connects, asks, prints and
// disconnects; none changes the daemon's state. The formatting pieces below are plain functions, exposed for
// tests. Thread-compatible.
//
//   kvtctl stats --socket /tmp/kvtd-decode.sock --requests
//   kvtctl watch --socket /tmp/kvtd-decode.sock req-17          # "+12.3 ms  ANCHOR_READY layer 4" ... DONE
//   kvtctl timeline --request req-17 --request req-18 --svg t.svg
//   kvtctl profile --socket /tmp/kvtd-decode.sock req-17       # where its time went, stage by stage
#ifndef KVT_TOOLS_KVTCTL_DAEMON_COMMANDS_H_
#define KVT_TOOLS_KVTCTL_DAEMON_COMMANDS_H_

#include <string>

#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "proto/kvt/v1/client.pb.h"
#include "tools/kvtctl/command.h"
#include "tools/kvtctl/timeline_svg.h"

namespace kvt::kvtctl {

CommandGroup StatsCommandGroup();
CommandGroup WatchCommandGroup();
CommandGroup TimelineCommandGroup();
CommandGroup ProfileCommandGroup();

// The daemon's counters as a two-column table; with `with_requests`, then a table of stats.requests() (or a
// line saying there are none).
std::string FormatStats(const v1::StatsResponse& stats, bool with_requests);

// The same fields as one JSON object, byte counts as integers; "requests" only with `with_requests`.
nlohmann::json StatsToJson(const v1::StatsResponse& stats, bool with_requests);

// One line without newline: "+12.3 ms  ANCHOR_READY layer 4", "+40.0 ms  DONE",
// "+40.0 ms  FAILED DEADLINE_EXCEEDED: <message>". Times are the event's, from when the daemon first saw the
// request.
std::string FormatEvent(const v1::TransferEvent& event);

// Per-layer anchor and full times (ms) of `events`, one entry per layer from 0 to the highest layer seen (a
// layer without an event has no time), and the DONE time if there is one.
TimelineSeries TimelineFromEvents(std::string label, absl::Span<const v1::TransferEvent> events);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_DAEMON_COMMANDS_H_
