// A fixed set of threads that run the daemon's codec work (page encode and decode), so the work of every
// request is spread over the available cores. Tasks have a priority: a queued high-priority task (an anchor's
// decode, an encode) runs before any queued low-priority one (a residual's decode), except that a low task
// waiting longer than the starvation bound goes next (docs/DAEMON.md, "Anchor first"). Thread-safe.
// Destruction runs every queued task, then joins.
//
//   WorkerPool pool(4);
//   pool.ParallelFor(pages.size(), [&](size_t i) { Encode(pages[i]); });  // returns when all are done
//   pool.Submit([=] { DecodeAnchor(...); });                              // fire and forget, high priority
//   pool.Submit([=] { DecodeFull(...); }, TaskPriority::kLow);
#ifndef KVT_SERVER_WORKER_POOL_H_
#define KVT_SERVER_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace kvt::server {

enum class TaskPriority { kHigh, kLow };

class WorkerPool {
 public:
  // Starts `threads` (>= 1) workers, named `name` (at most 15 characters: top -H, perf and /proc show it). A
  // low-priority task queued longer than `starvation_bound` runs before the high-priority ones queued after it.
  explicit WorkerPool(int threads, absl::Duration starvation_bound = absl::Seconds(1),
                      const std::string& name = "kvt-worker");
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` to run on a worker.
  void Submit(std::function<void()> task, TaskPriority priority = TaskPriority::kHigh);

  // Runs fn(0) .. fn(n - 1) on the workers (high priority) and the calling thread; returns when all have
  // returned. Indices are handed out in increasing order, so early indices finish first (what a pipelined sender
  // wants). At most `max_helpers` workers join the caller: short per-index work (a page's CRC) gains nothing from
  // waking every worker, and a burst of wake-ups takes cores from the data plane's threads. May be called from a
  // worker.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn, size_t max_helpers = ~size_t{0});

  int size() const { return static_cast<int>(threads_.size()); }
  // Tasks queued and not yet started.
  size_t queued() const;

 private:
  struct Queued {
    std::function<void()> task;
    absl::Time since;
  };
  void Run();

  const absl::Duration starvation_bound_;
  mutable kvt::Mutex mu_;
  std::deque<Queued> high_ ABSL_GUARDED_BY(mu_);
  std::deque<Queued> low_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_WORKER_POOL_H_
