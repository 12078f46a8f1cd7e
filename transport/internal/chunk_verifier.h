// Checks received chunks' CRC32C on threads of its own (one, or more where the wire moves bytes on several), so
// the engine's progress thread goes back to moving bytes (polling UCX, sending credit) while a chunk is checked
// instead of in series with it. Chunks are handed back in the order they were submitted, however many threads
// check them, so verification does not reorder arrivals.
// Thread-safe: Submit and TakeVerified are called from the progress thread; the checks run on the verifier's.
#ifndef KVT_TRANSPORT_INTERNAL_CHUNK_VERIFIER_H_
#define KVT_TRANSPORT_INTERNAL_CHUNK_VERIFIER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "transport/chunk_header.h"
#include "transport/internal/mutex.h"
#include "transport/internal/wire.h"
#include "transport/transport.h"

namespace kvt::transport::internal {

// A received chunk on its way to the consumer.
struct VerifiedChunk {
  LinkId link = 0;
  ChunkHeader header;
  PayloadBuffer payload;  // header.length bytes
  int64_t wire_bytes = 0;
  bool crc_ok = false;  // set by the verifier: the payload's CRC32C matches header.payload_crc32c
};

class ChunkVerifier {
 public:
  // Starts `threads` (>= 1) threads. `on_verified` runs on one of them after chunks are checked (the engine's
  // wake-up); it must not call back into the verifier.
  explicit ChunkVerifier(std::function<void()> on_verified, int threads = 1);
  // Stops and joins the threads; chunks not yet taken are dropped (their buffers released).
  ~ChunkVerifier();
  ChunkVerifier(const ChunkVerifier&) = delete;
  ChunkVerifier& operator=(const ChunkVerifier&) = delete;

  // Queues `chunk` for checking; crc_ok is ignored and set by the check.
  void Submit(VerifiedChunk chunk);
  // The chunks checked since the last call, in submission order.
  std::deque<VerifiedChunk> TakeVerified();

 private:
  void Run();

  // Constant after construction.
  const std::function<void()> on_verified_;

  // State below is protected by mu_.
  Mutex mu_;
  std::deque<VerifiedChunk> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_taken_ ABSL_GUARDED_BY(mu_) = 0;     // submission number of pending_.front()
  uint64_t next_in_order_ ABSL_GUARDED_BY(mu_) = 0;  // submission number verified_ waits for next
  std::map<uint64_t, VerifiedChunk> checked_ ABSL_GUARDED_BY(mu_);  // checked ahead of an earlier one
  std::deque<VerifiedChunk> verified_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> threads_;  // last: start after the fields they use exist
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_CHUNK_VERIFIER_H_
