// CollectiveWires for N ranks that are threads of one process, sharing an InProcessHub: a queue of messages
// per (source, destination). For tests; Kill() simulates a rank that dies.
//   auto hub = std::make_shared<InProcessHub>(4);
//   std::unique_ptr<CollectiveWire> wire = hub->Wire(2);  // hand each rank's wire to its thread
// Thread-safe: each rank's wire may be used from its own thread.
#ifndef KVT_COLLECTIVE_IN_PROCESS_WIRE_H_
#define KVT_COLLECTIVE_IN_PROCESS_WIRE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "collective/collective_wire.h"

namespace kvt::collective {

class InProcessHub : public std::enable_shared_from_this<InProcessHub> {
 public:
  // world_size >= 1.
  explicit InProcessHub(int world_size);

  int world_size() const { return world_size_; }

  // The wire of `rank`; it shares ownership of the hub. Call once per rank.
  std::unique_ptr<CollectiveWire> Wire(int rank);

  // Marks `rank` dead: its later sends fail and, once the messages it already sent are drained, receives from
  // it return UNAVAILABLE.
  void Kill(int rank);

 private:
  friend class InProcessWire;

  absl::Status Send(int src, int dst, absl::Span<const uint8_t> message);
  absl::Status Receive(int src, int dst, absl::Span<uint8_t> message, absl::Time deadline);

  // Constant after construction
  const int world_size_;

  Mutex mu_;
  // State below is protected by mu_
  std::vector<std::deque<std::vector<uint8_t>>> queues_ ABSL_GUARDED_BY(mu_);  // [src * world_size_ + dst]
  std::vector<bool> dead_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_IN_PROCESS_WIRE_H_
