#include "server/worker_pool.h"

#include <atomic>
#include <memory>

namespace kvt::server {

WorkerPool::WorkerPool(int threads) {
  if (threads < 1) threads = 1;
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() {
  {
    kvt::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::Submit(std::function<void()> task) {
  kvt::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

size_t WorkerPool::queued() const {
  kvt::MutexLock lock(&mu_);
  return queue_.size();
}

void WorkerPool::Run() {
  while (true) {
    std::function<void()> task;
    {
      kvt::MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void WorkerPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
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
  const size_t helpers = std::min(n - 1, threads_.size());
  for (size_t h = 0; h < helpers; ++h) Submit(work);
  work();
  // Helpers that start after every index is taken touch only `state`, never `fn`.
  State* s = state.get();
  kvt::MutexLock lock(&s->mu);
  s->mu.Await([s, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->done == n; });
}

}  // namespace kvt::server
