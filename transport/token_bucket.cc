#include "transport/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace kvt::transport {

TokenBucket::TokenBucket(double rate_bytes_per_second, int64_t burst_bytes, const Clock* clock)
    : rate_(rate_bytes_per_second),
      burst_(static_cast<double>(std::max<int64_t>(burst_bytes, 1))),
      clock_(clock),
      tokens_(burst_),
      last_refill_(clock->Now()) {}

void TokenBucket::Refill() {
  const absl::Time now = clock_->Now();
  if (now <= last_refill_) return;
  tokens_ = std::min(burst_, tokens_ + rate_ * absl::ToDoubleSeconds(now - last_refill_));
  last_refill_ = now;
}

absl::Duration TokenBucket::TimeUntilAvailable(int64_t bytes) {
  if (unlimited()) return absl::ZeroDuration();
  Refill();
  const double need = std::min(static_cast<double>(bytes), burst_);
  if (tokens_ >= need) return absl::ZeroDuration();
  // Round up to the next microsecond so that waiting that long always suffices.
  const double seconds = (need - tokens_) / rate_;
  return absl::Microseconds(std::ceil(seconds * 1e6));
}

bool TokenBucket::TryTake(int64_t bytes) {
  if (unlimited()) return true;
  if (TimeUntilAvailable(bytes) > absl::ZeroDuration()) return false;
  tokens_ -= static_cast<double>(bytes);
  return true;
}

double TokenBucket::tokens() {
  Refill();
  return tokens_;
}

}  // namespace kvt::transport
