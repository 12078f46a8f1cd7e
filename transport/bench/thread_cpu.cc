#include "transport/bench/thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvt::transport {

absl::flat_hash_map<int, ThreadCpu> SampleThreadCpu() {
  absl::flat_hash_map<int, ThreadCpu> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  while (dirent* e = readdir(dir)) {
    int tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid)) continue;
    std::ifstream in(absl::StrCat("/proc/self/task/", tid, "/stat"));
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string stat = buf.str();
    // "tid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ')'.
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
    // After the comm: state is field 3 of stat(5); utime and stime are fields 14 and 15.
    constexpr size_t kUtime = 14 - 3, kStime = 15 - 3;
    uint64_t utime = 0, stime = 0;
    if (fields.size() <= kStime || !absl::SimpleAtoi(fields[kUtime], &utime) ||
        !absl::SimpleAtoi(fields[kStime], &stime)) {
      continue;
    }
    out[tid] = ThreadCpu{stat.substr(open + 1, close - open - 1), (utime + stime) / ticks};
  }
  closedir(dir);
  return out;
}

std::vector<ThreadLoad> BusiestThreads(const absl::flat_hash_map<int, ThreadCpu>& before,
                                       const absl::flat_hash_map<int, ThreadCpu>& after, double wall_seconds,
                                       size_t top) {
  std::vector<ThreadLoad> loads;
  if (wall_seconds <= 0) return loads;
  for (const auto& [tid, now] : after) {
    auto then = before.find(tid);
    if (then == before.end()) continue;
    loads.push_back({now.name, (now.seconds - then->second.seconds) / wall_seconds});
  }
  std::sort(loads.begin(), loads.end(),
            [](const ThreadLoad& a, const ThreadLoad& b) { return a.utilization > b.utilization; });
  if (loads.size() > top) loads.resize(top);
  return loads;
}

std::string FormatThreadLoads(const std::vector<ThreadLoad>& loads) {
  if (loads.empty()) return "-";
  return absl::StrJoin(loads, ", ", [](std::string* out, const ThreadLoad& l) {
    absl::StrAppendFormat(out, "%s %.2f", l.name, l.utilization);
  });
}

}  // namespace kvt::transport
