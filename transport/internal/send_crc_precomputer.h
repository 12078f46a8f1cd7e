// Computes outbound chunks' CRC32C ahead of the link scheduler on threads of its own (one, or more where the
// wire moves bytes on several), so the sending
// progress thread finds a chunk's CRC ready instead of computing it in series with feeding the wire. A
// chunk's CRC depends only on its bytes, and the scheduler cuts every stream at multiples of the chunk size,
// so all of a transfer's chunks are known when it is queued. Lower stages (the anchor) are computed first,
// then queue order. A CRC not ready when the chunk goes is computed by the caller, as before: the precomputer
// only saves time.
//
// Threading: every public method is called from the engine's progress thread; the CRCs are computed on the
// precomputer's threads. Lifetime: a transfer's stream bytes must stay valid until Forget(transfer) returns
// (Forget waits for the CRCs of that transfer being computed at that moment, at most one chunk per thread).
#ifndef KVT_TRANSPORT_INTERNAL_SEND_CRC_PRECOMPUTER_H_
#define KVT_TRANSPORT_INTERNAL_SEND_CRC_PRECOMPUTER_H_

#include <cstdint>
#include <map>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "transport/internal/mutex.h"

namespace kvt::transport::internal {

class SendCrcPrecomputer {
 public:
  // `chunk_bytes` > 0: the scheduler's chunk size. Starts `threads` (>= 1) threads.
  explicit SendCrcPrecomputer(uint32_t chunk_bytes, int threads = 1);
  // Stops and joins the threads.
  ~SendCrcPrecomputer();
  SendCrcPrecomputer(const SendCrcPrecomputer&) = delete;
  SendCrcPrecomputer& operator=(const SendCrcPrecomputer&) = delete;

  // Queues every chunk of stream `index` of `transfer_id` (on lane `stage`), whose bytes are `bytes`.
  void Add(uint64_t transfer_id, uint32_t index, uint8_t stage, absl::Span<const uint8_t> bytes);
  // The CRC32C of `chunk`, which is bytes [offset, offset + chunk.size()) of that stream: the precomputed
  // value if there is one, else computed here. Either way the stream's chunks before it are not computed any
  // more.
  uint32_t Take(uint64_t transfer_id, uint32_t index, uint64_t offset, absl::Span<const uint8_t> chunk);
  // Drops what is queued or computed for `transfer_id` and waits until no CRC of it is being computed.
  void Forget(uint64_t transfer_id);

  // CRCs computed on the precomputer's threads so far (for tests).
  uint64_t computed() const;

 private:
  // A stream whose chunks from `next_offset` on are still to be computed.
  struct Cursor {
    uint64_t transfer_id = 0;
    uint32_t index = 0;
    absl::Span<const uint8_t> bytes;
    uint64_t next_offset = 0;
  };
  // (stage, queue order) -> cursor.
  using CursorKey = std::pair<uint8_t, uint64_t>;
  // (stream index, offset) -> CRC32C.
  using Ready = std::map<std::pair<uint32_t, uint64_t>, uint32_t>;
  struct Transfer {
    std::map<uint32_t, CursorKey> cursors;  // stream index -> its queued cursor
    Ready ready;
  };

  void Run();

  // Constant after construction.
  const uint32_t chunk_bytes_;

  // State below is protected by mu_.
  mutable Mutex mu_;
  std::map<CursorKey, Cursor> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Transfer> transfers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // Transfer -> CRCs of it being computed outside the lock now.
  absl::flat_hash_map<uint64_t, int> busy_ ABSL_GUARDED_BY(mu_);
  uint64_t computed_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> threads_;  // last: start after the fields they use exist
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_SEND_CRC_PRECOMPUTER_H_
