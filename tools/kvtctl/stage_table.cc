#include "tools/kvtctl/stage_table.h"

#include <optional>

#include "absl/strings/str_format.h"

namespace kvt::kvtctl {
namespace {

bool IsArrival(const std::string& stage) { return stage.rfind("arrive_", 0) == 0; }

// MB/s of the stage's bytes over its span, if both are non-zero.
std::optional<double> Rate(const v1::StageTime& t) {
  if (t.bytes() == 0 || t.last_end_us() <= t.first_start_us()) return std::nullopt;
  return static_cast<double>(t.bytes()) / static_cast<double>(t.last_end_us() - t.first_start_us());
}

}  // namespace

const v1::StageTime* FindStage(const v1::ProfileResponse& profile, absl::string_view stage) {
  for (const v1::StageTime& t : profile.stages()) {
    if (t.stage() == stage) return &t;
  }
  return nullptr;
}

std::string FormatStageTable(const v1::ProfileResponse& p) {
  std::string out = absl::StrFormat("%-16s %8s %10s %10s %10s %10s %16s\n", "stage", "runs", "busy ms", "first ms",
                                    "last ms", "MB", "MB/s over span");
  for (const v1::StageTime& t : p.stages()) {
    const std::optional<double> rate = Rate(t);
    absl::StrAppendFormat(&out, "%-16s %8d %10s %10.1f %10.1f %10s %16s\n", t.stage(), t.count(),
                          IsArrival(t.stage()) ? "-" : absl::StrFormat("%.1f", t.busy_us() / 1e3),
                          t.first_start_us() / 1e3, t.last_end_us() / 1e3,
                          t.bytes() > 0 ? absl::StrFormat("%.1f", t.bytes() / 1e6) : "-",
                          rate ? absl::StrFormat("%.1f", *rate) : "-");
  }
  return out;
}

nlohmann::json StagesToJson(const v1::ProfileResponse& p) {
  nlohmann::json out = nlohmann::json::object();
  for (const v1::StageTime& t : p.stages()) {
    const std::optional<double> rate = Rate(t);
    out[t.stage()] = {{"runs", t.count()},
                      {"busy_ms", t.busy_us() / 1e3},
                      {"first_ms", t.first_start_us() / 1e3},
                      {"last_ms", t.last_end_us() / 1e3},
                      {"bytes", t.bytes()},
                      {"mb_per_s", rate ? nlohmann::json(*rate) : nlohmann::json(nullptr)}};
  }
  return out;
}

}  // namespace kvt::kvtctl
