// See host_cpu.h.
#include "tools/kvtctl/host_cpu.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvt::kvtctl {

absl::StatusOr<CpuTimes> ParseProcStat(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "cpu ")) continue;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    // cpu user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already in user.
    if (fields.size() < 9) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/stat's cpu line has ", fields.size() - 1, " counters, not the 8 up to steal"));
    }
    uint64_t v[8];
    for (int i = 0; i < 8; ++i) {
      if (!absl::SimpleAtoi(fields[i + 1], &v[i])) {
        return absl::InvalidArgumentError(absl::StrCat("/proc/stat's cpu counter ", i + 1, " is not a number: '",
                                                       fields[i + 1], "'"));
      }
    }
    CpuTimes t;
    for (uint64_t x : v) t.total += x;
    t.idle = v[3] + v[4];
    t.steal = v[7];
    return t;
  }
  return absl::InvalidArgumentError("/proc/stat has no aggregate \"cpu \" line");
}

absl::StatusOr<CpuTimes> ReadCpuTimes() {
  std::ifstream in("/proc/stat");
  if (!in) return absl::UnavailableError("no /proc/stat to read the host's CPU times from");
  std::stringstream text;
  text << in.rdbuf();
  return ParseProcStat(text.str());
}

std::optional<CpuShare> ShareBetween(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.idle < before.idle || after.steal < before.steal) return std::nullopt;
  const double total = static_cast<double>(after.total - before.total);
  const double idle = static_cast<double>(after.idle - before.idle);
  const double steal = static_cast<double>(after.steal - before.steal);
  CpuShare s;
  s.steal = std::min(1.0, steal / total);
  s.busy = std::max(0.0, std::min(1.0, (total - idle - steal) / total));
  return s;
}

}  // namespace kvt::kvtctl
