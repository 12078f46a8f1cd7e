#include "collective/in_process_wire.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace kvt::collective {

class InProcessWire : public CollectiveWire {
 public:
  InProcessWire(std::shared_ptr<InProcessHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world_size(); }

  absl::Status Send(int dst, absl::Span<const uint8_t> message, absl::Time /*deadline*/) override {
    return hub_->Send(rank_, dst, message);
  }
  absl::Status Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) override {
    return hub_->Receive(src, rank_, message, deadline);
  }

 private:
  const std::shared_ptr<InProcessHub> hub_;
  const int rank_;
};

InProcessHub::InProcessHub(int world_size)
    : world_size_(world_size), queues_(world_size * world_size), dead_(world_size, false) {}

std::unique_ptr<CollectiveWire> InProcessHub::Wire(int rank) {
  return std::make_unique<InProcessWire>(shared_from_this(), rank);
}

void InProcessHub::Kill(int rank) {
  MutexLock lock(&mu_);
  dead_[rank] = true;
}

absl::Status InProcessHub::Send(int src, int dst, absl::Span<const uint8_t> message) {
  if (dst < 0 || dst >= world_size_ || dst == src) {
    return absl::InvalidArgumentError(absl::StrFormat("rank %d cannot send to rank %d", src, dst));
  }
  MutexLock lock(&mu_);
  if (dead_[src]) return absl::UnavailableError(absl::StrFormat("rank %d is dead", src));
  if (dead_[dst]) return absl::UnavailableError(absl::StrFormat("rank %d is dead", dst));
  queues_[src * world_size_ + dst].emplace_back(message.begin(), message.end());
  return absl::OkStatus();
}

absl::Status InProcessHub::Receive(int src, int dst, absl::Span<uint8_t> message, absl::Time deadline) {
  if (src < 0 || src >= world_size_ || dst == src) {
    return absl::InvalidArgumentError(absl::StrFormat("rank %d cannot receive from rank %d", dst, src));
  }
  MutexLock lock(&mu_);
  auto& queue = queues_[src * world_size_ + dst];
  const bool ready = mu_.AwaitWithDeadline(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue.empty() || dead_[src] || dead_[dst]; },
      deadline);
  if (!ready) {
    return absl::DeadlineExceededError(
        absl::StrFormat("rank %d: nothing from rank %d by the deadline", dst, src));
  }
  if (dead_[dst]) return absl::UnavailableError(absl::StrFormat("rank %d is dead", dst));
  if (queue.empty()) return absl::UnavailableError(absl::StrFormat("rank %d is dead", src));
  std::vector<uint8_t> front = std::move(queue.front());
  queue.pop_front();
  if (front.size() != message.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("rank %d sent rank %d %d bytes where %d were expected",
                                                      src, dst, front.size(), message.size()));
  }
  if (!front.empty()) std::memcpy(message.data(), front.data(), front.size());
  return absl::OkStatus();
}

}  // namespace kvt::collective
