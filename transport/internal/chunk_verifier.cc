#include "transport/internal/chunk_verifier.h"

#include <pthread.h>

#include <utility>

#include "common/crc32c.h"

namespace kvt::transport::internal {

ChunkVerifier::ChunkVerifier(std::function<void()> on_verified)
    : on_verified_(std::move(on_verified)), thread_([this] {
        pthread_setname_np(pthread_self(), "kvt-verify");
        Run();
      }) {}

ChunkVerifier::~ChunkVerifier() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
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
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      chunk = std::move(pending_.front());
      pending_.pop_front();
    }
    chunk.crc_ok = Crc32c(chunk.payload.get(), chunk.header.length) == chunk.header.payload_crc32c;
    {
      MutexLock lock(&mu_);
      verified_.push_back(std::move(chunk));
    }
    on_verified_();
  }
}

}  // namespace kvt::transport::internal
