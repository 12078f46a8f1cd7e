// CPU time of a process's threads, from /proc/PID/task, so a benchmark can say which thread bounds a run (a
// thread near 1.0 CPU-second per second is saturated). Linux only; elsewhere the samples are empty. The time is the
// scheduler's nanosecond count (schedstat) where the kernel keeps it, else utime + stime in clock ticks (10 ms: too
// coarse for runs of ~100 ms).
// Thread-safe (reads /proc only).
#ifndef KVT_TRANSPORT_BENCH_THREAD_CPU_H_
#define KVT_TRANSPORT_BENCH_THREAD_CPU_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvt::transport {

struct ThreadCpu {
  std::string name;      // the thread's name (comm), e.g. "kvt-progress"
  double seconds = 0;    // CPU time so far
};

// Thread id -> name and CPU time, for every thread of process `pid` (0: this process) now; empty if it is gone.
absl::flat_hash_map<int, ThreadCpu> SampleThreadCpu(int pid = 0);

struct ThreadLoad {
  std::string name;
  double utilization = 0;  // CPU-seconds per wall-clock second between the samples
};

// The `top` threads that used most CPU between `before` and `after` (threads present in both), busiest first.
std::vector<ThreadLoad> BusiestThreads(const absl::flat_hash_map<int, ThreadCpu>& before,
                                       const absl::flat_hash_map<int, ThreadCpu>& after, double wall_seconds,
                                       size_t top);

// "name 0.97, name 0.52, ..." ("-" when empty).
std::string FormatThreadLoads(const std::vector<ThreadLoad>& loads);

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_BENCH_THREAD_CPU_H_
