// The kvt data plane: moves opaque byte streams, tagged (transfer id, page, stage), between daemons over peer
// links, anchor lane (stage 0) first. Implementations: UCX (transport/ucx/ucx_transport.h) and, for tests, an
// in-process loopback (transport/loopback/loopback_transport.h); both run the same link engine.
//
// Sender:   PeerId peer = *t->Connect(remote->address(), timeout);
//           auto handle = *t->Send(peer, transfer_id, {{page, 0, anchor_bytes}, {page, 1, residual_bytes}});
//           absl::Status s = handle->Wait();  // bytes may be freed once Wait returns
// Receiver: t->Expect(transfer_id, {{page, 0, anchor_len}, {page, 1, residual_len}});
//           while (true) { auto chunk = t->Receive(transfer_id, timeout); ... if (chunk->transfer_complete()) break; }
// One consumer for every inbound transfer (a consumer blocked on one transfer cannot starve the others):
//           while (running) { auto event = t->ReceiveAny(timeout); ... }
//
// Every method is thread-safe. A transport owns one progress thread; callers never block it.
#ifndef KVT_TRANSPORT_TRANSPORT_H_
#define KVT_TRANSPORT_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/chunk_header.h"

namespace kvt::transport {

// Names a link this transport opened with Connect. Never reused within one transport.
using PeerId = uint64_t;

// One stream to send: `bytes` must stay live and unchanged until the transfer's SendHandle is done.
struct OutboundStream {
  uint32_t page = 0;
  uint8_t stage = 0;  // 0 = anchor lane; 1 .. kMaxStages-1 = residual lanes
  absl::Span<const uint8_t> bytes;
};

// One stream a receiver accepts: chunks outside [0, length) of an announced (page, stage) are rejected.
struct StreamBounds {
  uint32_t page = 0;
  uint8_t stage = 0;
  uint64_t length = 0;
  // Where the stream's bytes land, or null. With a destination the transport writes each admitted chunk straight
  // into destination[offset, offset + length) (UCX's rendezvous receives into it; nothing is copied again), and
  // the ReceivedChunk's payload points there. The memory must stay valid while Expect's `placement_owner` lives,
  // which the transport holds until no read into it is pending. Without one, chunks land in the link's own
  // receive buffers.
  uint8_t* destination = nullptr;
};

// Completion of one outbound transfer. Thread-safe; shared by the caller and the transport.
class SendHandle {
 public:
  virtual ~SendHandle() = default;
  // Blocks until the transfer finishes; returns its status. Finishing is bounded by the link's failure
  // detection (peer_timeout, stall_timeout). After it returns, the transport no longer touches the bytes.
  virtual absl::Status Wait() = 0;
  // Waits at most `timeout`; returns whether the transfer finished.
  virtual bool WaitFor(absl::Duration timeout) = 0;
  // OK once the receiver acknowledged that every byte arrived and passed its checks; UNAVAILABLE when the link
  // went down; DEADLINE_EXCEEDED when the peer stopped granting credit for stall_timeout; CANCELLED after Cancel;
  // the receiver's code when it rejected the transfer (NOT_FOUND: it did not expect it; OUT_OF_RANGE, DATA_LOSS,
  // RESOURCE_EXHAUSTED: a chunk failed its checks). Meaningful once finished.
  virtual absl::Status status() const = 0;
  // When the transfer finished (absl::Now() then, for reports); meaningful once finished.
  virtual absl::Time finished_at() const = 0;
};

// Returns receive-buffer credit to a link. Implemented by the transport; held by ReceivedChunk.
class CreditReturn {
 public:
  virtual ~CreditReturn() = default;
  virtual void Return(int64_t bytes) = 0;
};

// Takes back the payload buffer of a destroyed ReceivedChunk. Implemented by the transport (a link's pool of
// receive buffers); thread-safe, since consumers drop chunks on their own threads.
class PayloadRecycler {
 public:
  virtual ~PayloadRecycler() = default;
  // Takes ownership of `buffer`, which came from this recycler.
  virtual void Recycle(uint8_t* buffer) = 0;
};

// Releases a payload buffer: back to its recycler, or delete[] when it has neither a recycler nor an owner. A
// payload that lies in a receiver's placement memory (StreamBounds::destination) has an owner instead: releasing
// it only drops this reference to that memory.
struct PayloadRelease {
  std::shared_ptr<PayloadRecycler> recycler;
  std::shared_ptr<const void> owner;
  void operator()(uint8_t* buffer) {
    if (owner != nullptr) {
      owner.reset();
    } else if (recycler != nullptr) {
      recycler->Recycle(buffer);
    } else {
      delete[] buffer;
    }
  }
};

// The bytes of a received chunk (at least its length), owned until the chunk is dropped.
using PayloadBuffer = std::unique_ptr<uint8_t[], PayloadRelease>;

// One received, verified chunk. Move-only. Holds receive-buffer credit of its link until destroyed, so a
// receiver that keeps chunks (or stops calling Receive) slows its sender down.
class ReceivedChunk {
 public:
  ReceivedChunk(ChunkHeader header, PayloadBuffer payload, bool stream_complete,
                bool transfer_complete, uint64_t arrival_sequence, int64_t credit_bytes,
                std::shared_ptr<CreditReturn> credit)
      : header_(header),
        payload_(std::move(payload)),
        stream_complete_(stream_complete),
        transfer_complete_(transfer_complete),
        arrival_sequence_(arrival_sequence),
        credit_bytes_(credit_bytes),
        credit_(std::move(credit)) {}
  ReceivedChunk(ReceivedChunk&&) = default;
  ReceivedChunk& operator=(ReceivedChunk&& o) {
    Release();
    header_ = o.header_;
    payload_ = std::move(o.payload_);
    stream_complete_ = o.stream_complete_;
    transfer_complete_ = o.transfer_complete_;
    arrival_sequence_ = o.arrival_sequence_;
    credit_bytes_ = o.credit_bytes_;
    credit_ = std::move(o.credit_);
    return *this;
  }
  ~ReceivedChunk() { Release(); }

  const ChunkHeader& header() const { return header_; }
  absl::Span<const uint8_t> payload() const { return {payload_.get(), header_.length}; }
  // The last chunk of its (page, stage) stream / of the whole transfer. Chunks of one stream come in offset order.
  bool stream_complete() const { return stream_complete_; }
  bool transfer_complete() const { return transfer_complete_; }
  // Position of this chunk among all chunks this transport handed to consumers (0, 1, 2, ... across every
  // transfer and link): the order they arrived in, whichever thread reads them.
  uint64_t arrival_sequence() const { return arrival_sequence_; }

 private:
  // The buffer goes back before the credit, so the chunk the credit lets in can reuse it.
  void Release() {
    payload_.reset();
    if (credit_ != nullptr) credit_->Return(credit_bytes_);
    credit_.reset();
  }

  ChunkHeader header_;
  PayloadBuffer payload_;
  bool stream_complete_;
  bool transfer_complete_;
  uint64_t arrival_sequence_;
  int64_t credit_bytes_;
  std::shared_ptr<CreditReturn> credit_;
};

// One piece of news about an expected transfer, from ReceiveAny.
struct InboundEvent {
  uint64_t transfer_id = 0;
  // OK with `chunk` set: the next chunk of that transfer (same contract as Receive). Non-OK: the transfer failed
  // with this status (as Receive would return it) and is gone; `chunk` is empty.
  absl::Status status;
  std::optional<ReceivedChunk> chunk;
};

// Counters since the transport started. Rejected chunks are counted by cause.
struct TransportStats {
  uint64_t chunks_sent = 0;
  uint64_t payload_bytes_sent = 0;
  uint64_t anchor_chunks_sent = 0;
  uint64_t promoted_chunks_sent = 0;
  uint64_t chunks_received = 0;
  uint64_t payload_bytes_received = 0;
  uint64_t rejected_malformed = 0;          // header unparsable or header CRC wrong
  uint64_t rejected_bad_crc = 0;            // payload CRC32C mismatch
  uint64_t rejected_unknown_transfer = 0;   // not Expect-ed, or bound to another link
  uint64_t rejected_out_of_bounds = 0;      // unknown stream, outside its length, or overlapping a received range
  uint64_t rejected_over_window = 0;        // peer exceeded the receive buffer it was granted
  uint64_t links_down = 0;
  uint64_t transfers_stalled = 0;
  int64_t max_inflight_bytes_seen = 0;      // largest unacknowledged chunk bytes on any link (sender side)
  int64_t max_receive_buffered_bytes_seen = 0;  // largest received, unconsumed chunk bytes on any link
};

// What an implementation is, for logs and benchmarks.
struct Capabilities {
  std::string name;        // "loopback", "ucx"
  std::string transports;  // what UCX was allowed to use, e.g. "tcp"
};

class Transport {
 public:
  virtual ~Transport() = default;

  // What a peer passes to Connect to reach this transport: "ucx:<hex worker address>" or "loopback:<n>".
  virtual std::string address() const = 0;
  virtual Capabilities capabilities() const = 0;

  // Opens a link to the transport listening at `address`. UNAVAILABLE if it cannot be reached within `timeout`.
  virtual absl::StatusOr<PeerId> Connect(const std::string& address, absl::Duration timeout) = 0;

  // Queues a transfer's streams on `peer`'s lanes. INVALID_ARGUMENT for empty or duplicate (page, stage)
  // streams or a bad stage; NOT_FOUND for an unknown peer; UNAVAILABLE if the link is down; ALREADY_EXISTS if
  // `transfer_id` is in flight on this transport; RESOURCE_EXHAUSTED past max_transfers_per_link.
  virtual absl::StatusOr<std::shared_ptr<SendHandle>> Send(PeerId peer, uint64_t transfer_id,
                                                           std::vector<OutboundStream> streams) = 0;

  // Announces an inbound transfer and its bounds. Chunks of unannounced transfers are rejected. The transfer is
  // bound to the link its first chunk arrives on; with a nonzero `link_group`, the first chunk of any transfer of
  // the group binds every transfer of the group still unbound, so that when that link goes down they all fail
  // (UNAVAILABLE), even those that had not received a byte yet (e.g. the later layers of one request).
  // ALREADY_EXISTS, INVALID_ARGUMENT as for Send.
  // `placement_owner` keeps the streams' destinations valid (see StreamBounds::destination); the transport holds it
  // until the transfer is gone and no read into its memory is pending.
  virtual absl::Status Expect(uint64_t transfer_id, std::vector<StreamBounds> streams, uint64_t link_group = 0,
                              std::shared_ptr<const void> placement_owner = nullptr) = 0;

  // Next chunk of an expected transfer. DEADLINE_EXCEEDED if none within `timeout`; NOT_FOUND if not expected
  // (or already complete and drained); the transfer's failure (DATA_LOSS for a bad CRC, OUT_OF_RANGE for a chunk
  // outside the bounds, UNAVAILABLE when its link went down, CANCELLED) once it failed, after which it is gone.
  virtual absl::StatusOr<ReceivedChunk> Receive(uint64_t transfer_id, absl::Duration timeout) = 0;

  // Next chunk or failure of ANY expected transfer, roughly in arrival order. DEADLINE_EXCEEDED if nothing within
  // `timeout`. Same removal rules as Receive (a transfer is gone after its failure or its last chunk is handed out).
  // May be mixed with Receive; each chunk is handed out once. Cancelled transfers report nothing.
  virtual absl::StatusOr<InboundEvent> ReceiveAny(absl::Duration timeout) = 0;

  // Cancels an outbound or inbound transfer: queued chunks are dropped, its handle finishes CANCELLED.
  virtual void Cancel(uint64_t transfer_id) = 0;

  virtual TransportStats stats() const = 0;
};

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_TRANSPORT_H_
