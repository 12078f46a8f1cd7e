#include "transport/internal/receive_buffer_pool.h"

#include <utility>

namespace kvt::transport::internal {

ReceiveBufferPool::ReceiveBufferPool(size_t buffer_bytes, size_t max_buffers)
    : buffer_bytes_(buffer_bytes), max_buffers_(max_buffers) {}

PayloadBuffer ReceiveBufferPool::Take(size_t length) {
  if (length > buffer_bytes_ / 2 && length <= buffer_bytes_) {
    std::unique_ptr<uint8_t[]> buffer;
    {
      MutexLock lock(&mu_);
      if (!idle_.empty()) {
        buffer = std::move(idle_.back());
        idle_.pop_back();
      } else if (buffers_ < max_buffers_) {
        ++buffers_;
      } else {
        return PayloadBuffer(new uint8_t[length]);
      }
    }
    if (buffer == nullptr) buffer.reset(new uint8_t[buffer_bytes_]);
    return PayloadBuffer(buffer.release(), PayloadRelease{shared_from_this()});
  }
  return PayloadBuffer(new uint8_t[length]);
}

void ReceiveBufferPool::Recycle(uint8_t* buffer) {
  std::unique_ptr<uint8_t[]> owned(buffer);
  MutexLock lock(&mu_);
  idle_.push_back(std::move(owned));
}

size_t ReceiveBufferPool::buffers() const {
  MutexLock lock(&mu_);
  return buffers_;
}

size_t ReceiveBufferPool::idle() const {
  MutexLock lock(&mu_);
  return idle_.size();
}

}  // namespace kvt::transport::internal
