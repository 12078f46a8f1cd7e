// The message layer under a Communicator: ordered, reliable byte messages between the ranks of one group.
// Implementations: InProcessWire (ranks as threads of one process, for tests), TcpWire (a full mesh of
// sockets between processes or hosts) and UcxWire (UCX tag messages: shared memory, tcp, verbs).
//
// Threading: one thread at a time calls a given wire's Send and Receive (the Communicator that owns it).
// Messages from one rank to another arrive whole and in the order they were sent.
#ifndef KVT_COLLECTIVE_COLLECTIVE_WIRE_H_
#define KVT_COLLECTIVE_COLLECTIVE_WIRE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kvt::collective {

class CollectiveWire {
 public:
  virtual ~CollectiveWire() = default;

  // This rank, in [0, world_size()).
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Sends `message` to rank `dst` (not this rank). Returns once the bytes are handed off: the caller may
  // reuse `message`; a Send never waits for the peer to call Receive. UNAVAILABLE when `dst` is gone,
  // DEADLINE_EXCEEDED when it cannot hand off by `deadline`.
  virtual absl::Status Send(int dst, absl::Span<const uint8_t> message, absl::Time deadline) = 0;

  // Receives the next message from rank `src` (not this rank) into `message`, which must be its exact size
  // (the collectives always know it). INVALID_ARGUMENT (and the message is consumed) on a size mismatch;
  // UNAVAILABLE when `src` is gone and sent nothing more; DEADLINE_EXCEEDED when nothing came by `deadline`.
  virtual absl::Status Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) = 0;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_COLLECTIVE_WIRE_H_
