// A token bucket that paces the bytes a peer link puts on the wire, so a loopback run behaves like a link of
// the chosen bandwidth. Tokens are bytes; they refill at `rate` up to `burst`. A message of n bytes may go when
// the bucket holds min(n, burst) tokens; it then takes n (the bucket may go negative, and the debt is repaid
// before the next message), so the long-run rate is exact and a message larger than the burst is never stuck.
// Not thread-safe: owned by one link, used from the link's progress thread.
#ifndef KVT_TRANSPORT_TOKEN_BUCKET_H_
#define KVT_TRANSPORT_TOKEN_BUCKET_H_

#include <cstdint>

#include "absl/time/time.h"
#include "transport/clock.h"

namespace kvt::transport {

class TokenBucket {
 public:
  // rate_bytes_per_second <= 0 means unlimited (every call admits at once). burst_bytes must be > 0 when
  // limited. `clock` must outlive the bucket. The bucket starts full.
  TokenBucket(double rate_bytes_per_second, int64_t burst_bytes, const Clock* clock);

  bool unlimited() const { return rate_ <= 0; }

  // Returns how long until `bytes` may go (zero when it may go now).
  absl::Duration TimeUntilAvailable(int64_t bytes);

  // Takes `bytes` if they may go now; returns whether it did.
  bool TryTake(int64_t bytes);

  // Tokens now (after refill); may be negative right after a large message.
  double tokens();

 private:
  void Refill();

  // Constant after construction.
  const double rate_;
  const double burst_;
  const Clock* const clock_;

  double tokens_;
  absl::Time last_refill_;
};

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_TOKEN_BUCKET_H_
