// WorkerPool: every task runs, high priority before low, a starved low task goes first, ParallelFor (also from a
// worker), and destruction runs what is queued.
#include "server/worker_pool.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace kvt::server {
namespace {

// Occupies a one-thread pool until released, so that what is submitted meanwhile queues.
struct Blocker {
  absl::Notification started, release;
  void Occupy(WorkerPool& pool) {
    pool.Submit([this] {
      started.Notify();
      release.WaitForNotification();
    });
    started.WaitForNotification();
  }
};

TEST(WorkerPool, QueuedHighPriorityTasksRunBeforeQueuedLowOnes) {
  std::vector<std::string> order;
  {
    WorkerPool pool(1, absl::Hours(1));
    Blocker b;
    b.Occupy(pool);
    pool.Submit([&] { order.push_back("low 1"); }, TaskPriority::kLow);
    pool.Submit([&] { order.push_back("high 1"); });
    pool.Submit([&] { order.push_back("low 2"); }, TaskPriority::kLow);
    pool.Submit([&] { order.push_back("high 2"); }, TaskPriority::kHigh);
    EXPECT_EQ(pool.queued(), 4u);
    b.release.Notify();
  }  // the destructor runs every queued task, then joins
  EXPECT_EQ(order, (std::vector<std::string>{"high 1", "high 2", "low 1", "low 2"}));
}

TEST(WorkerPool, ALowTaskWaitingPastTheStarvationBoundRunsBeforeHighOnes) {
  std::vector<std::string> order;
  {
    WorkerPool pool(1, absl::Milliseconds(20));
    Blocker b;
    b.Occupy(pool);
    pool.Submit([&] { order.push_back("low"); }, TaskPriority::kLow);
    absl::SleepFor(absl::Milliseconds(40));  // the low task is now past its bound
    pool.Submit([&] { order.push_back("high"); });
    b.release.Notify();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"low", "high"}));
}

TEST(WorkerPool, ParallelForRunsEveryIndexOnceAlsoFromInsideAWorker) {
  WorkerPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(hits.size(), [&](size_t i) { hits[i].fetch_add(1); });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  // Nested: every worker busy in an outer ParallelFor still finishes (the callers do the work themselves).
  std::atomic<int> inner{0};
  pool.ParallelFor(6, [&](size_t) { pool.ParallelFor(50, [&](size_t) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 300);
  pool.ParallelFor(0, [&](size_t) { ADD_FAILURE() << "no index to run"; });
  // With at most one helper, every index still runs once.
  std::vector<std::atomic<int>> capped(300);
  pool.ParallelFor(
      capped.size(), [&](size_t i) { capped[i].fetch_add(1); }, /*max_helpers=*/1);
  for (size_t i = 0; i < capped.size(); ++i) ASSERT_EQ(capped[i].load(), 1) << i;
}

}  // namespace
}  // namespace kvt::server
