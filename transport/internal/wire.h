// The lowest layer of a transport: moves framed messages (a small header plus an optional payload) over links
// to peers. Implemented over UCX active messages (ucx/ucx_wire.h) and in-process queues (loopback/). The engine
// (internal/engine.h) builds lanes, pacing, flow control and failure handling on top.
//
// Threading: a Wire is created, used and destroyed on its engine's progress thread only, and calls WireEvents
// back only from inside Progress() on that thread (never from inside Send, Connect or Close).
#ifndef KVT_TRANSPORT_INTERNAL_WIRE_H_
#define KVT_TRANSPORT_INTERNAL_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvt::transport::internal {

using LinkId = uint64_t;

enum class MessageKind : uint8_t {
  kChunk = 1,    // header: a ChunkHeader; payload: the chunk bytes
  kControl = 2,  // header: a ControlMessage; no payload
};

// The payload of a message being received. Valid only during the OnMessage call that hands it out.
class InboundPayload {
 public:
  virtual ~InboundPayload() = default;
  virtual size_t length() const = 0;
  // Starts copying the payload into dest[0, length()), at most once. Returns true when the bytes are already in
  // `dest`; false when they will be, with OnPayloadRead(cookie, status) reported later. A payload never read is
  // dropped when OnMessage returns.
  virtual absl::StatusOr<bool> ReadInto(uint8_t* dest, uint64_t cookie) = 0;
};

class WireEvents {
 public:
  virtual ~WireEvents() = default;
  // A link is usable: an outbound one from Connect, or one a peer opened to us (inbound).
  virtual void OnLinkUp(LinkId link, bool inbound) = 0;
  // A link failed or closed; no more messages come from it. Sends still pending report OnSendDone with an error.
  virtual void OnLinkDown(LinkId link, absl::Status status) = 0;
  virtual void OnMessage(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                         InboundPayload& payload) = 0;
  virtual void OnPayloadRead(uint64_t cookie, absl::Status status) = 0;
  // Exactly once per accepted Send.
  virtual void OnSendDone(uint64_t cookie, absl::Status status) = 0;
};

class Wire {
 public:
  virtual ~Wire() = default;
  // What a peer's Connect takes to reach this wire.
  virtual std::string address() const = 0;
  // Starts opening a link; OnLinkUp or OnLinkDown follows. INVALID_ARGUMENT for an unparsable address.
  virtual absl::StatusOr<LinkId> Connect(const std::string& address) = 0;
  // Queues a message. `header` and `payload` must stay valid until OnSendDone(cookie). On an error return,
  // OnSendDone is not called.
  virtual absl::Status Send(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                            absl::Span<const uint8_t> payload, uint64_t cookie) = 0;
  // Closes a link (idempotent). Pending sends complete with errors; OnLinkDown is not reported for it.
  virtual void Close(LinkId link) = 0;
  // Makes progress and reports events; returns how much work it did (0 = idle).
  virtual int Progress() = 0;
  // How long the engine may sleep when idle before calling Progress again (events that arrive meanwhile wait).
  virtual absl::Duration idle_poll_interval() const = 0;
  // Whether a link's messages arrive in the order they were sent (one FIFO path). A wire that stripes a link over
  // parallel paths says no; the engine then holds a chunk back while chunks of a lower stage are still on the wire,
  // so that anchors still arrive before the residuals queued behind them. (Exactly so where a send completes only
  // once the receiver has the bytes, as UCX rendezvous does; a small eager send completes when it leaves, so a
  // residual may overtake by up to the link's window.)
  virtual bool ordered() const { return true; }
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_WIRE_H_
