// Chooses the next chunk a peer link sends: one lane per stage, the anchor lane (stage 0) first.
//
// Invariant: a residual chunk (stage >= 1) is chosen while the anchor lane is non-empty only when its lane has
// waited, since it became non-empty or was last served, at least `starvation_bound` (it is then "promoted" for one
// chunk and its wait restarts). Otherwise the lowest non-empty stage goes. Inside a lane, streams go in the order
// they were added, each cut front to back into chunks of at most `chunk_bytes`, so an anchor that becomes ready
// waits for at most the one chunk already chosen, plus at most one promoted chunk per starvation bound.
//
// Not thread-safe: owned by one link, used from its progress thread. Holds keys, never the bytes.
#ifndef KVT_TRANSPORT_LANE_SCHEDULER_H_
#define KVT_TRANSPORT_LANE_SCHEDULER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <optional>

#include "absl/time/time.h"
#include "transport/chunk_header.h"

namespace kvt::transport {

// Names one stream of one transfer: the sender's index into that transfer's stream list.
struct StreamKey {
  uint64_t transfer_id = 0;
  uint32_t index = 0;
};

class LaneScheduler {
 public:
  // One chunk chosen to go next: bytes [offset, offset + length) of `key`.
  struct Cut {
    StreamKey key;
    uint8_t stage = 0;
    uint64_t offset = 0;
    uint32_t length = 0;
    bool promoted = false;  // a residual chosen over a ready anchor by the starvation bound
  };

  // chunk_bytes > 0; starvation_bound > 0.
  LaneScheduler(uint32_t chunk_bytes, absl::Duration starvation_bound);

  // Queues a stream of `length` bytes (> 0) on lane `stage` (< kMaxStages).
  void Add(StreamKey key, uint8_t stage, uint64_t length, absl::Time now);

  // The chunk that would go now, or nothing when every lane is empty. Does not change state.
  std::optional<Cut> Peek(absl::Time now) const;

  // Consumes `cut`, which must be what Peek(now) just returned.
  void Commit(const Cut& cut, absl::Time now);

  // Drops every queued stream of `transfer_id`; returns the bytes dropped.
  uint64_t RemoveTransfer(uint64_t transfer_id);

  bool empty() const;
  uint64_t queued_bytes(uint8_t stage) const { return lanes_[stage].queued_bytes; }
  uint32_t chunk_bytes() const { return chunk_bytes_; }

 private:
  struct Entry {
    StreamKey key;
    uint64_t next_offset = 0;
    uint64_t length = 0;
  };
  struct Lane {
    std::deque<Entry> streams;
    uint64_t queued_bytes = 0;
    absl::Time waiting_since;  // meaningful while `streams` is non-empty
  };

  // Constant after construction.
  const uint32_t chunk_bytes_;
  const absl::Duration starvation_bound_;

  std::array<Lane, kMaxStages> lanes_;
};

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_LANE_SCHEDULER_H_
