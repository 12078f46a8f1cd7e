// Host memory for the containers of requests, kept between requests (docs/DAEMON.md, "Buffers"): the encoded
// layers a prefill daemon sends from and the layer inboxes a decode daemon's data plane writes into. Allocating
// them per request cost more than moving the bytes (fresh memory page-faults on first touch, and pinning it for
// the GPU's DMA costs about as much as the copy it speeds up; docs/BENCHMARKS.md, "Line rate"), so released
// buffers stay in the pool, up to a cap, for the next request of a similar size.
//
// Page-locked (pinned) buffers are what the GPU copies from and into; where pinning fails (no GPU) a pinned
// request gets pageable memory, which the caller can tell from Buffer::pinned(). Thread-safe; a Buffer may be
// released on any thread, also after the pool's owner let go of it (the pool lives until its last buffer), and
// releasing never frees memory on the releasing thread (a reaper thread of the pool does).
//
//   auto pool = HostBufferPool::Create({.max_kept_bytes = 4ull << 30});
//   std::shared_ptr<HostBuffer> b = pool->Acquire(bytes, HostMemory::kPinned);  // b->data(), b->size() >= bytes
#ifndef KVT_SERVER_HOST_BUFFER_POOL_H_
#define KVT_SERVER_HOST_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvt::server {

enum class HostMemory { kPageable, kPinned };

class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  virtual uint8_t* data() const = 0;
  // At least what was asked for; contents undefined (a reused buffer holds an earlier request's bytes).
  virtual size_t size() const = 0;
  virtual bool pinned() const = 0;
};

struct HostBufferPoolOptions {
  // Bytes of released buffers kept for reuse (pinned and pageable together); beyond it they are freed.
  size_t max_kept_bytes = size_t{4} << 30;
};

struct HostBufferPoolStats {
  uint64_t acquired = 0;         // Acquire calls
  uint64_t reused = 0;           // of them served by a kept buffer
  uint64_t allocated_bytes = 0;  // bytes newly allocated (pinned or pageable) since the pool was made
  size_t kept_bytes = 0;         // held for reuse now
  size_t leased_bytes = 0;       // lent out now
};

class HostBufferPool {
 public:
  static std::shared_ptr<HostBufferPool> Create(const HostBufferPoolOptions& options);
  virtual ~HostBufferPool() = default;

  // A buffer of at least `bytes` (> 0) of `memory`, reused when a kept one of the same kind holds at least that
  // and at most 4 times as much (the smallest such), else newly allocated (sizes rounded up to 2 MiB, so that a
  // request's layers share buffers). Never fails for lack of a GPU: pinned falls back to pageable. The buffer goes back
  // to the pool when the last reference is dropped.
  virtual std::shared_ptr<HostBuffer> Acquire(size_t bytes, HostMemory memory) = 0;

  virtual HostBufferPoolStats stats() const = 0;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_HOST_BUFFER_POOL_H_
