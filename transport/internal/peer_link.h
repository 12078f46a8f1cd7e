// State of one peer link and of the outbound transfers queued on it, as the engine's progress thread sees it.
// Everything here is touched only by that thread, except LinkCredit, which consumer threads use to hand
// receive-buffer credit back.
#ifndef KVT_TRANSPORT_INTERNAL_PEER_LINK_H_
#define KVT_TRANSPORT_INTERNAL_PEER_LINK_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/internal/wire.h"
#include "transport/lane_scheduler.h"
#include "transport/token_bucket.h"
#include "transport/transport.h"
#include "transport/internal/detached_status.h"
#include "transport/internal/receive_buffer_pool.h"
#include "transport/internal/mutex.h"

namespace kvt::transport::internal {

// Receive-side credit ledger of a link. Invariant: `buffered` counts chunk bytes (header included) admitted on
// this link and not yet released by the consumer; released bytes accumulate in `to_return` until the progress
// thread sends them to the peer as one kCredit message.
class LinkCredit final : public CreditReturn {
 public:
  void Return(int64_t bytes) override {
    buffered.fetch_sub(bytes, std::memory_order_relaxed);
    to_return.fetch_add(bytes, std::memory_order_release);
  }
  std::atomic<int64_t> buffered{0};
  std::atomic<int64_t> to_return{0};
};

// Completion state shared by an outbound transfer and its caller.
class SendState final : public SendHandle {
 public:
  absl::Status Wait() override {
    internal::MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; });
    return Detached(status_);
  }
  bool WaitFor(absl::Duration timeout) override {
    internal::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; }, timeout);
  }
  absl::Status status() const override {
    internal::MutexLock lock(&mu_);
    return status_;
  }
  absl::Time finished_at() const override {
    internal::MutexLock lock(&mu_);
    return finished_at_;
  }
  void Finish(absl::Status status) {
    internal::MutexLock lock(&mu_);
    if (done_) return;
    status_ = Detached(status);
    finished_at_ = absl::Now();  // wall time, as reported: the engine's clock is monotonic (or a test's fake)
    done_ = true;
  }

 private:
  mutable internal::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time finished_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status status_ ABSL_GUARDED_BY(mu_) = absl::UnknownError("transfer still in progress");
};

struct OutboundTransfer {
  uint64_t id = 0;
  LinkId link = 0;
  std::vector<OutboundStream> streams;
  std::shared_ptr<SendState> state;
  uint64_t bytes_unsent = 0;     // not yet handed to the wire
  uint64_t sends_outstanding = 0;  // handed to the wire, OnSendDone not yet seen
  bool acked = false;            // the receiver reported every byte arrived
  absl::Status failure;          // non-OK once failed; finished when sends_outstanding reaches 0
};

struct PeerLink {
  // `receive_window` is the most chunk bytes (headers included) this side lets the peer have buffered here.
  PeerLink(LinkId id, bool inbound, uint32_t chunk_bytes, absl::Duration starvation_bound, double rate,
           int64_t burst, int64_t receive_window, const Clock* clock, absl::Time now)
      : id(id),
        inbound(inbound),
        scheduler(chunk_bytes, starvation_bound),
        bucket(rate, burst, clock),
        credit(std::make_shared<LinkCredit>()),
        receive_buffers(std::make_shared<ReceiveBufferPool>(
            chunk_bytes, static_cast<size_t>(receive_window / std::max<int64_t>(chunk_bytes, 1)))),
        last_heard(now),
        last_sent(now) {}

  const LinkId id;
  const bool inbound;
  bool wire_up = false;       // OnLinkUp seen
  bool hello_received = false;
  bool goodbye_answered = false;  // the peer heard our kGoodbye (shutdown waits for this, bounded)
  absl::Status down;          // non-OK once the link failed
  absl::Time down_at;         // when `down` was set
  int64_t window = 0;         // chunk bytes we may have unacknowledged (from the peer's hello)
  int64_t inflight = 0;       // chunk bytes sent and not yet credited back
  LaneScheduler scheduler;
  TokenBucket bucket;
  std::shared_ptr<LinkCredit> credit;
  // Payload buffers of chunks received on this link; at most a receive window of them.
  std::shared_ptr<ReceiveBufferPool> receive_buffers;
  absl::flat_hash_set<uint64_t> transfers;  // outbound transfer ids on this link
  absl::Time last_heard;
  absl::Time last_sent;
  absl::Time blocked_since = absl::InfiniteFuture();  // waiting for credit since
  uint64_t sends_outstanding = 0;
  // Chunks handed to the wire and not yet reported done, per stage; and since when the next chunk has been held
  // back behind lower-stage ones still on an unordered wire.
  std::array<uint32_t, kMaxStages> chunks_on_wire{};
  absl::Time held_since = absl::InfiniteFuture();

  bool ready() const { return wire_up && hello_received && down.ok(); }
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_PEER_LINK_H_
