// A fixed set of threads that run the daemon's codec work (page encode and decode), so the work of every
// request is spread over the available cores. Thread-safe. Destruction runs every queued task, then joins.
//
//   WorkerPool pool(4);
//   pool.ParallelFor(pages.size(), [&](size_t i) { Encode(pages[i]); });  // returns when all are done
//   pool.Submit([=] { DecodePage(...); });                                 // fire and forget
#ifndef KVT_SERVER_WORKER_POOL_H_
#define KVT_SERVER_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace kvt::server {

class WorkerPool {
 public:
  // Starts `threads` (>= 1) workers.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` to run on a worker.
  void Submit(std::function<void()> task);

  // Runs fn(0) .. fn(n - 1) on the workers and the calling thread; returns when all have returned. Indices are
  // handed out in increasing order, so early indices finish first (what a pipelined sender wants).
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

  int size() const { return static_cast<int>(threads_.size()); }
  // Tasks queued and not yet started.
  size_t queued() const;

 private:
  void Run();

  mutable kvt::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_WORKER_POOL_H_
