#include "transport/internal/chunk_verifier.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "common/crc32c.h"

namespace kvt::transport::internal {

ChunkVerifier::ChunkVerifier(std::function<void()> on_verified, int threads)
    : on_verified_(std::move(on_verified)) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "kvt-verify");
      Run();
    });
  }
}

ChunkVerifier::~ChunkVerifier() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ChunkVerifier::Submit(VerifiedChunk chunk) {
  MutexLock lock(&mu_);
  pending_.push_back(std::move(chunk));
}

std::deque<VerifiedChunk> ChunkVerifier::TakeVerified() {
  std::deque<VerifiedChunk> out;
  MutexLock lock(&mu_);
  out.swap(verified_);
  return out;
}

void ChunkVerifier::Run() {
  while (true) {
    VerifiedChunk chunk;
    uint64_t number = 0;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      chunk = std::move(pending_.front());
      pending_.pop_front();
      number = next_taken_++;
    }
    chunk.crc_ok = Crc32c(chunk.payload.get(), chunk.header.length) == chunk.header.payload_crc32c;
    bool released = false;
    {
      MutexLock lock(&mu_);
      checked_.emplace(number, std::move(chunk));
      // Hand back the checked chunks that have no unchecked one before them.
      for (auto it = checked_.begin(); it != checked_.end() && it->first == next_in_order_; it = checked_.erase(it)) {
        verified_.push_back(std::move(it->second));
        ++next_in_order_;
        released = true;
      }
    }
    if (released) on_verified_();
  }
}

}  // namespace kvt::transport::internal
