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

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace

absl::flat_hash_map<int, ThreadCpu> SampleThreadCpu(int pid) {
  absl::flat_hash_map<int, ThreadCpu> out;
  const std::string task = pid > 0 ? absl::StrCat("/proc/", pid, "/task") : std::string("/proc/self/task");
  DIR* dir = opendir(task.c_str());
  if (dir == nullptr) return out;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  while (dirent* e = readdir(dir)) {
    int tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid)) continue;
    const std::string stat = ReadAll(absl::StrCat(task, "/", tid, "/stat"));
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
    double seconds = (utime + stime) / ticks;
    // schedstat: "on-CPU ns, waiting ns, timeslices"; all zero where the kernel does not keep them.
    uint64_t on_cpu_ns = 0;
    const std::vector<std::string> sched =
        absl::StrSplit(ReadAll(absl::StrCat(task, "/", tid, "/schedstat")), ' ', absl::SkipEmpty());
    if (!sched.empty() && absl::SimpleAtoi(sched[0], &on_cpu_ns) && on_cpu_ns > 0) seconds = on_cpu_ns / 1e9;
    out[tid] = ThreadCpu{stat.substr(open + 1, close - open - 1), seconds};
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
