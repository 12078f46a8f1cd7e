#include "transport/clock.h"

#include <chrono>

namespace kvt::transport {
namespace {

class SteadyClock final : public Clock {
 public:
  absl::Time Now() const override {
    const auto since_boot = std::chrono::steady_clock::now().time_since_epoch();
    return absl::UnixEpoch() + absl::FromChrono(since_boot);
  }
};

}  // namespace

Clock* RealClock() {
  static SteadyClock* const clock = new SteadyClock();
  return clock;
}

}  // namespace kvt::transport
