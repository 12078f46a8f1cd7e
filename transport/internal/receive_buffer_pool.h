// A link's pool of chunk receive buffers: the progress thread takes one per inbound chunk and the consumer
// hands it back by dropping the ReceivedChunk, so steady-state receiving reuses memory that is already mapped
// instead of faulting in (and freeing) a fresh chunk-sized buffer per chunk. Thread-safe: Take on the
// progress thread, Recycle on any consumer thread.
//
// Invariant: at most `max_buffers` pooled buffers of `buffer_bytes` exist at once (in use or idle), so the
// pool never holds more than max_buffers x buffer_bytes; the engine sizes that to the link's receive window.
// A payload the pool cannot serve (too small to be worth a pooled buffer, too large, or the pool at its
// limit) gets a fresh buffer of its own length, freed when dropped.
#ifndef KVT_TRANSPORT_INTERNAL_RECEIVE_BUFFER_POOL_H_
#define KVT_TRANSPORT_INTERNAL_RECEIVE_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "transport/internal/mutex.h"
#include "transport/transport.h"

namespace kvt::transport::internal {

class ReceiveBufferPool final : public PayloadRecycler,
                                public std::enable_shared_from_this<ReceiveBufferPool> {
 public:
  // `buffer_bytes` > 0. Make with std::make_shared: Take hands out references to the pool.
  ReceiveBufferPool(size_t buffer_bytes, size_t max_buffers);
  ReceiveBufferPool(const ReceiveBufferPool&) = delete;
  ReceiveBufferPool& operator=(const ReceiveBufferPool&) = delete;

  // A buffer of at least `length` bytes, contents unspecified. Pooled when buffer_bytes / 2 < length <=
  // buffer_bytes and the pool is below its limit; the buffer keeps the pool alive until it is released.
  PayloadBuffer Take(size_t length);
  void Recycle(uint8_t* buffer) override;

  // Pooled buffers in existence (in use or idle), and those idle.
  size_t buffers() const;
  size_t idle() const;

 private:
  // Constant after construction.
  const size_t buffer_bytes_;
  const size_t max_buffers_;

  // State below is protected by mu_.
  mutable Mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> idle_ ABSL_GUARDED_BY(mu_);
  size_t buffers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_RECEIVE_BUFFER_POOL_H_
