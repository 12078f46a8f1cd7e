#include "transport/bench/thread_cpu.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvt::transport {
namespace {

// A thread that spins for a while shows up, named, as the busiest; a sleeping one does not.
TEST(ThreadCpuTest, SpinningThreadIsTheBusiestAndNamed) {
  std::atomic<bool> started{false}, stop{false};
  std::thread spinner([&] {
    pthread_setname_np(pthread_self(), "cpu-test-spin");
    started = true;
    volatile double x = 1;
    while (!stop.load(std::memory_order_relaxed)) x = std::sqrt(x + 1.0);
  });
  std::thread sleeper([&] {
    pthread_setname_np(pthread_self(), "cpu-test-sleep");
    while (!stop.load()) absl::SleepFor(absl::Milliseconds(5));
  });
  while (!started.load()) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(20));  // both threads named before the first sample
  const auto before = SampleThreadCpu();
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Milliseconds(400));
  const auto after = SampleThreadCpu();
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  stop = true;
  spinner.join();
  sleeper.join();

  ASSERT_GE(after.size(), 3u);  // main, spinner, sleeper
  const std::vector<ThreadLoad> loads = BusiestThreads(before, after, wall, 2);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0].name, "cpu-test-spin");
  // Shared CI cores may not give the spinner a whole core; it still gets far more than the sleeper.
  EXPECT_GT(loads[0].utilization, 0.2);
  EXPECT_LE(loads[0].utilization, 1.2);
  EXPECT_GE(loads[0].utilization, loads[1].utilization);
  const std::string text = FormatThreadLoads(loads);
  EXPECT_EQ(text.rfind("cpu-test-spin 0.", 0) == 0 || text.rfind("cpu-test-spin 1.", 0) == 0, true) << text;
}

// Another process's threads are read through its pid: a child that spins gains CPU time between two samples.
TEST(ThreadCpuTest, AnotherProcessByPid) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile double x = 1;
    const absl::Time end = absl::Now() + absl::Seconds(2);
    while (absl::Now() < end) x = std::sqrt(x + 1.0);
    _exit(0);
  }
  const auto before = SampleThreadCpu(child);
  absl::SleepFor(absl::Milliseconds(300));
  const auto after = SampleThreadCpu(child);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_EQ(after.size(), 1u);  // one thread, named as its parent was
  ASSERT_TRUE(before.contains(child));
  EXPECT_GT(after.at(child).seconds, before.at(child).seconds);
  EXPECT_TRUE(SampleThreadCpu(child).empty());  // gone: nothing to read
}

TEST(ThreadCpuTest, EmptyAndDegenerateInputs) {
  EXPECT_EQ(FormatThreadLoads({}), "-");
  absl::flat_hash_map<int, ThreadCpu> a = {{1, {"x", 1.0}}}, b = {{1, {"x", 2.0}}, {2, {"new", 5.0}}};
  EXPECT_TRUE(BusiestThreads(a, b, 0, 4).empty());  // no wall time: nothing to divide by
  const auto loads = BusiestThreads(a, b, 2.0, 4);
  ASSERT_EQ(loads.size(), 1u);  // the thread absent from the first sample is left out
  EXPECT_EQ(loads[0].name, "x");
  EXPECT_DOUBLE_EQ(loads[0].utilization, 0.5);
}

}  // namespace
}  // namespace kvt::transport
