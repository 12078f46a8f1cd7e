// A clock that moves only when a test advances it. Thread-safe.
#ifndef KVT_TRANSPORT_FAKE_CLOCK_H_
#define KVT_TRANSPORT_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "transport/clock.h"
#include "transport/internal/mutex.h"

namespace kvt::transport {

class FakeClock final : public Clock {
 public:
  absl::Time Now() const override {
    internal::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    internal::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable internal::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch() + absl::Hours(1);
};

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_FAKE_CLOCK_H_
