// The receive side's table of inbound transfers: what was announced (Expect), which byte ranges arrived, and
// the verified chunks waiting for the consumer. The progress thread admits and delivers chunks; consumer threads
// Receive (one transfer) or ReceiveAny (whichever transfer has news first). Chunks of one stream are handed out in
// offset order; a chunk that arrives early waits (within the link's receive-buffer credit) until the gap before it
// is filled.
// Thread-safe.
#ifndef KVT_TRANSPORT_INTERNAL_TRANSFER_TABLE_H_
#define KVT_TRANSPORT_INTERNAL_TRANSFER_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/chunk_header.h"
#include "transport/transport.h"
#include "transport/internal/mutex.h"

namespace kvt::transport {

class TransferTable {
 public:
  TransferTable();
  ~TransferTable();

  // Announces transfer `id`. INVALID_ARGUMENT: no streams, a zero length, a stage >= kMaxStages, or a
  // duplicate (page, stage). ALREADY_EXISTS: `id` is already in the table.
  // `link_group`: see Transport::Expect (0 = none).
  // `placement_owner`: see Transport::Expect.
  absl::Status Expect(uint64_t id, std::vector<StreamBounds> streams, uint64_t link_group = 0,
                      std::shared_ptr<const void> placement_owner = nullptr);

  // Checks an arriving chunk and reserves its byte range. `link` identifies the link it came on; the first
  // admitted chunk binds the transfer to its link. Errors (the chunk must then be dropped):
  //   NOT_FOUND: unknown or finished transfer, or one bound to another link (the transfer is left alone);
  //   OUT_OF_RANGE: no such (page, stage), range outside the stream, or overlapping received bytes (the transfer
  //   fails with OUT_OF_RANGE).
  // On success: where the chunk's bytes go (its stream's destination plus the chunk's offset, with the owner that
  // keeps that memory valid), or a null destination when the stream has none.
  struct Placement {
    uint8_t* destination = nullptr;
    std::shared_ptr<const void> owner;
  };
  absl::StatusOr<Placement> Admit(uint64_t link, const ChunkHeader& header);

  // Hands a verified chunk, previously admitted, to the consumer. `credit_bytes` go back through `credit` when the
  // consumer drops the chunk (or at once if the transfer is gone). Returns true when this chunk completed the
  // transfer: every announced byte has now arrived (the sender may be told).
  bool Deliver(const ChunkHeader& header, PayloadBuffer payload, int64_t credit_bytes,
               std::shared_ptr<CreditReturn> credit);

  // Fails transfer `id` (no-op if unknown): its waiting chunks are dropped, Receive or ReceiveAny returns `status`
  // once.
  void Fail(uint64_t id, absl::Status status);
  // Fails every transfer bound to `link`.
  void FailLink(uint64_t link, const absl::Status& status);
  // Fails with CANCELLED and forgets `id` (ReceiveAny reports nothing of it). Returns whether it was there.
  bool Cancel(uint64_t id);

  // See Transport::Receive.
  absl::StatusOr<ReceivedChunk> Receive(uint64_t id, absl::Duration timeout);
  // See Transport::ReceiveAny. Chunks come out in arrival order (ReceivedChunk::arrival_sequence), a failure in
  // the order it happened among them.
  absl::StatusOr<InboundEvent> ReceiveAny(absl::Duration timeout);

  size_t size() const;
  // Items in ReceiveAny's news queue, stale ones included; for tests of its bound (at most about twice the live
  // ones, whether or not anyone calls ReceiveAny).
  size_t queued_news() const;

 private:
  struct Entry;

  // Invariant: every chunk waiting in an entry's ready queue, and every failure not yet handed out, has one live
  // News in news_, and news_ is in the order they happened. A News goes stale when what it announces is handed
  // out (by Receive too), dropped (Cancel), or its entry is gone; stale ones are skipped at the head and removed
  // in bulk whenever the queue has doubled since the last sweep.
  struct News {
    uint64_t transfer_id;
    uint64_t generation;  // tells this entry from an earlier one of the same id
    bool failure;         // the transfer failed; else a chunk became ready
    uint64_t arrival;     // the chunk's arrival sequence; unused for a failure
  };
  static constexpr size_t kMinSweep = 64;

  bool IsLive(const News& n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish(News n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishFailure(uint64_t id, const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases `id` from the table if it still maps to `entry`, waking Receive calls still waiting on it.
  void Remove(uint64_t id, const std::shared_ptr<Entry>& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable internal::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_arrival_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<News> news_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = kMinSweep;
};

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_INTERNAL_TRANSFER_TABLE_H_
