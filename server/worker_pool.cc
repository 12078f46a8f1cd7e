#include "server/worker_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <memory>

namespace kvt::server {

WorkerPool::WorkerPool(int threads, absl::Duration starvation_bound, const std::string& name)
    : starvation_bound_(starvation_bound) {
  if (threads < 1) threads = 1;
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name] {
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      Run();
    });
  }
}

WorkerPool::~WorkerPool() {
  {
    kvt::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::Submit(std::function<void()> task, TaskPriority priority) {
  const absl::Time now = absl::Now();
  kvt::MutexLock lock(&mu_);
  (priority == TaskPriority::kHigh ? high_ : low_).push_back({std::move(task), now});
}

size_t WorkerPool::queued() const {
  kvt::MutexLock lock(&mu_);
  return high_.size() + low_.size();
}

void WorkerPool::Run() {
  while (true) {
    std::function<void()> task;
    {
      kvt::MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !high_.empty() || !low_.empty(); });
      if (high_.empty() && low_.empty()) return;  // stopping, and everything queued has run
      // High first, unless the oldest low task has waited past the bound.
      const bool starved = !low_.empty() && absl::Now() - low_.front().since >= starvation_bound_;
      std::deque<Queued>& from = (high_.empty() || starved) ? low_ : high_;
      task = std::move(from.front().task);
      from.pop_front();
    }
    task();
  }
}

void WorkerPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn, size_t max_helpers) {
  if (n == 0) return;
  // Shared by the helpers; the caller waits for `done` to reach n before `state` can go.
  struct State {
    std::atomic<size_t> next{0};
    kvt::Mutex mu;
    size_t done ABSL_GUARDED_BY(mu) = 0;
  };
  auto state = std::make_shared<State>();
  auto work = [state, n, &fn]() {
    size_t finished = 0;
    for (size_t i = state->next.fetch_add(1); i < n; i = state->next.fetch_add(1)) {
      fn(i);
      ++finished;
    }
    if (finished > 0) {
      kvt::MutexLock lock(&state->mu);
      state->done += finished;
    }
  };
  const size_t helpers = std::min({n - 1, threads_.size(), max_helpers});
  for (size_t h = 0; h < helpers; ++h) Submit(work);
  work();
  // Helpers that start after every index is taken touch only `state`, never `fn`.
  State* s = state.get();
  kvt::MutexLock lock(&s->mu);
  s->mu.Await([s, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->done == n; });
}

}  // namespace kvt::server
