// How busy the host's CPUs were over a stretch of time, from the kernel's counters (/proc/stat): the demo reports
// it beside each transfer, because its link emulation paces bytes on the CPU, and a virtual machine whose CPUs
// are taken by other tenants ("steal") runs the emulated link slower than its rate. Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_HOST_CPU_H_
#define KVT_TOOLS_KVTCTL_HOST_CPU_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvt::kvtctl {

// The aggregate "cpu" line's counters, in clock ticks since boot, all CPUs together.
struct CpuTimes {
  uint64_t total = 0;  // user + nice + system + idle + iowait + irq + softirq + steal
  uint64_t idle = 0;   // idle + iowait
  uint64_t steal = 0;  // time the hypervisor gave this machine's virtual CPUs to someone else
};

// Parses the text of /proc/stat. INVALID_ARGUMENT if it has no "cpu " line or the line has fewer than 8 counters
// (kernels before 2.6.11 had no steal field) or a counter is not a number.
absl::StatusOr<CpuTimes> ParseProcStat(absl::string_view text);

// Reads /proc/stat now. UNAVAILABLE where there is none (not Linux, a sandbox without /proc).
absl::StatusOr<CpuTimes> ReadCpuTimes();

// Of the CPU time between two readings, the stolen and the busy (neither idle nor stolen) fractions, in [0, 1];
// nullopt when no tick passed or a counter went backwards (not a measurement of the stretch).
struct CpuShare {
  double steal = 0;
  double busy = 0;
};
std::optional<CpuShare> ShareBetween(const CpuTimes& before, const CpuTimes& after);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_HOST_CPU_H_
