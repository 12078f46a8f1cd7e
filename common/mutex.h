// absl::Mutex, absl::MutexLock and a one-shot Notification as ThreadSanitizer can see them.
// Debian's Abseil is compiled without TSan, so the synchronization inside its Mutex is invisible to TSan and
// every access the Mutex guards looks like a race. Under TSan these wrappers tell it about each acquire and
// release (__tsan_acquire / __tsan_release on the mutex); otherwise they compile to plain absl calls. They keep
// the thread-safety annotations, so clang -Wthread-safety checks them like absl::Mutex. Under TSan they also
// switch off Abseil's own deadlock detector, whose bookkeeping TSan cannot see either.
// Thread-safe, as the types they wrap.
#ifndef KVT_COMMON_MUTEX_H_
#define KVT_COMMON_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
#define KVT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVT_TSAN 1
#endif
#endif

#ifdef KVT_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace kvt {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() { IgnoreAbslDeadlockGraphUnderTsan(); }

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.Lock();
    Acquired();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    Releasing();
    mu_.Unlock();
  }
  // Releases the lock until `pred()` (called with the lock held, by this or another thread) is true; returns
  // with the lock held.
  template <typename Pred>
  void Await(Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    Predicate<Pred> p{this, &pred};
    Releasing();
    mu_.Await(absl::Condition(&p, &Predicate<Pred>::Eval));
    Acquired();
  }
  // As Await, giving up at `deadline`; returns whether `pred()` held.
  template <typename Pred>
  bool AwaitWithDeadline(Pred pred, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    return AwaitWithTimeout(pred, deadline - absl::Now());
  }
  // As Await, giving up after `timeout`; returns whether `pred()` held.
  template <typename Pred>
  bool AwaitWithTimeout(Pred pred, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    Predicate<Pred> p{this, &pred};
    Releasing();
    const bool met = mu_.AwaitWithTimeout(absl::Condition(&p, &Predicate<Pred>::Eval), timeout);
    Acquired();
    return met;
  }

 private:
  // Abseil may evaluate a waiter's predicate on whichever thread holds the mutex, and may release the mutex right
  // after without returning to us: bracket the evaluation with an acquire and a release, so its reads are ordered
  // after earlier holders' writes and before later holders' writes.
  template <typename Pred>
  struct Predicate {
    Mutex* mu;
    Pred* pred;
    // Abseil calls this only with the mutex held, which the analysis cannot see.
    bool Eval() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      mu->Acquired();
      const bool met = (*pred)();
      mu->Releasing();
      return met;
    }
  };

  // Abseil's deadlock detector keeps one process-wide graph of mutexes behind an internal spinlock that TSan
  // cannot see, so threads locking different mutexes at once look like a race inside GraphCycles. TSan detects
  // lock-order inversions itself; under TSan, Abseil's detector is switched off (once, before first use).
  static void IgnoreAbslDeadlockGraphUnderTsan() {
#ifdef KVT_TSAN
    static const bool ignored = [] {
      absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
      return true;
    }();
    (void)ignored;
#endif
  }

  void Acquired() {
#ifdef KVT_TSAN
    __tsan_acquire(&mu_);
#endif
  }
  void Releasing() {
#ifdef KVT_TSAN
    __tsan_release(&mu_);
#endif
  }

  absl::Mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Set once, waited for by any number of threads.
class Notification {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  void WaitForNotification() {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_; });
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_; }, timeout);
  }
  bool HasBeenNotified() {
    MutexLock lock(&mu_);
    return notified_;
  }

 private:
  Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvt

#endif  // KVT_COMMON_MUTEX_H_
