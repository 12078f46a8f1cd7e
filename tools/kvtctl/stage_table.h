// A request's per-stage profile (the Profile RPC; server/stage_profile.h) as a readable table and as JSON, for
// `kvtctl profile` and `kvtctl demo`. Plain functions, thread-safe.
//
//   stage              runs    busy ms   first ms    last ms        MB   MB/s over span
//   arrive_anchor       634          -        1.2      201.4     335.1           1674.4
#ifndef KVT_TOOLS_KVTCTL_STAGE_TABLE_H_
#define KVT_TOOLS_KVTCTL_STAGE_TABLE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "proto/kvt/v1/client.pb.h"

namespace kvt::kvtctl {

// Stage `stage`'s figures in `profile` ("encode", "decode_full", ...; server/stage_profile.h), null if the daemon
// did not report it.
const v1::StageTime* FindStage(const v1::ProfileResponse& profile, absl::string_view stage);

// One row per stage that ran, in the daemon's order; "-" where a figure means nothing (the busy time of an
// arrival, the rate of a stage that moved no bytes or spanned no time).
std::string FormatStageTable(const v1::ProfileResponse& profile);

// {"stage_name": {"runs", "busy_ms", "first_ms", "last_ms", "bytes", "mb_per_s"}, ...}; mb_per_s is bytes over
// the span from first start to last end, null where that is empty.
nlohmann::json StagesToJson(const v1::ProfileResponse& profile);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_STAGE_TABLE_H_
