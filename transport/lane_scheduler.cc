#include "transport/lane_scheduler.h"

#include <algorithm>

namespace kvt::transport {

LaneScheduler::LaneScheduler(uint32_t chunk_bytes, absl::Duration starvation_bound)
    : chunk_bytes_(chunk_bytes), starvation_bound_(starvation_bound) {}

void LaneScheduler::Add(StreamKey key, uint8_t stage, uint64_t length, absl::Time now) {
  Lane& lane = lanes_[stage];
  if (lane.streams.empty()) lane.waiting_since = now;
  lane.streams.push_back(Entry{key, 0, length});
  lane.queued_bytes += length;
}

std::optional<LaneScheduler::Cut> LaneScheduler::Peek(absl::Time now) const {
  int chosen = -1;
  bool promoted = false;
  // A starved residual lane first: the one that has waited longest.
  if (!lanes_[0].streams.empty()) {
    absl::Time oldest = absl::InfiniteFuture();
    for (int s = 1; s < kMaxStages; ++s) {
      const Lane& lane = lanes_[s];
      if (lane.streams.empty() || now - lane.waiting_since < starvation_bound_) continue;
      if (lane.waiting_since < oldest) {
        oldest = lane.waiting_since;
        chosen = s;
        promoted = true;
      }
    }
  }
  if (chosen < 0) {
    for (int s = 0; s < kMaxStages; ++s) {
      if (!lanes_[s].streams.empty()) {
        chosen = s;
        break;
      }
    }
  }
  if (chosen < 0) return std::nullopt;
  const Entry& e = lanes_[chosen].streams.front();
  Cut cut;
  cut.key = e.key;
  cut.stage = static_cast<uint8_t>(chosen);
  cut.offset = e.next_offset;
  cut.length = static_cast<uint32_t>(std::min<uint64_t>(chunk_bytes_, e.length - e.next_offset));
  cut.promoted = promoted;
  return cut;
}

void LaneScheduler::Commit(const Cut& cut, absl::Time now) {
  Lane& lane = lanes_[cut.stage];
  Entry& e = lane.streams.front();
  e.next_offset += cut.length;
  lane.queued_bytes -= cut.length;
  if (e.next_offset == e.length) lane.streams.pop_front();
  lane.waiting_since = now;
}

uint64_t LaneScheduler::RemoveTransfer(uint64_t transfer_id) {
  uint64_t dropped = 0;
  for (Lane& lane : lanes_) {
    auto& q = lane.streams;
    for (auto it = q.begin(); it != q.end();) {
      if (it->key.transfer_id == transfer_id) {
        dropped += it->length - it->next_offset;
        it = q.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Lane& lane : lanes_) {
    uint64_t queued = 0;
    for (const Entry& e : lane.streams) queued += e.length - e.next_offset;
    lane.queued_bytes = queued;
  }
  return dropped;
}

bool LaneScheduler::empty() const {
  return std::all_of(lanes_.begin(), lanes_.end(), [](const Lane& l) { return l.streams.empty(); });
}

}  // namespace kvt::transport
