#include "server/stage_profile.h"

#include <algorithm>

namespace kvt::server {

absl::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kEncode:
      return "encode";
    case Stage::kStagingWait:
      return "staging_wait";
    case Stage::kSend:
      return "send";
    case Stage::kRendezvous:
      return "rendezvous";
    case Stage::kArriveAnchor:
      return "arrive_anchor";
    case Stage::kArriveResidual:
      return "arrive_residual";
    case Stage::kDecodeQueue:
      return "decode_queue";
    case Stage::kDecodeAnchor:
      return "decode_anchor";
    case Stage::kDecodeFull:
      return "decode_full";
    case Stage::kCount:
      break;
  }
  return "unknown";
}

void StageProfile::Add(Stage stage, absl::Time begin, absl::Time end, uint64_t bytes) {
  const int i = static_cast<int>(stage);
  if (i < 0 || i >= kStageCount) return;
  if (end < begin) end = begin;
  const absl::Duration from = begin - start_, to = end - start_;
  kvt::MutexLock lock(&mu_);
  StageTotals& t = totals_[i];
  if (t.count == 0) {
    t.first_start = from;
    t.last_end = to;
  } else {
    t.first_start = std::min(t.first_start, from);
    t.last_end = std::max(t.last_end, to);
  }
  ++t.count;
  t.busy += end - begin;
  t.bytes += bytes;
}

std::array<StageTotals, kStageCount> StageProfile::Snapshot() const {
  kvt::MutexLock lock(&mu_);
  return totals_;
}

}  // namespace kvt::server
