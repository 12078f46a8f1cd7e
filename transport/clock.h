// A monotonic clock behind an interface, so rate limiting and scheduling can be tested with a fake.
// Only differences and comparisons of the returned times mean anything (the epoch is arbitrary).
// Implementations are thread-safe.
#ifndef KVT_TRANSPORT_CLOCK_H_
#define KVT_TRANSPORT_CLOCK_H_

#include "absl/time/time.h"

namespace kvt::transport {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Returns the process-wide monotonic clock (steady_clock). Never null; lives forever.
Clock* RealClock();

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_CLOCK_H_
