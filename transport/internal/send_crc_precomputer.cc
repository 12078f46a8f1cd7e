#include "transport/internal/send_crc_precomputer.h"

#include <pthread.h>

#include <algorithm>

#include "common/crc32c.h"

namespace kvt::transport::internal {

SendCrcPrecomputer::SendCrcPrecomputer(uint32_t chunk_bytes, int threads) : chunk_bytes_(chunk_bytes) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "kvt-send-crc");
      Run();
    });
  }
}

SendCrcPrecomputer::~SendCrcPrecomputer() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void SendCrcPrecomputer::Add(uint64_t transfer_id, uint32_t index, uint8_t stage,
                             absl::Span<const uint8_t> bytes) {
  MutexLock lock(&mu_);
  const CursorKey key{stage, next_sequence_++};
  queue_[key] = Cursor{transfer_id, index, bytes, 0};
  transfers_[transfer_id].cursors[index] = key;
}

uint32_t SendCrcPrecomputer::Take(uint64_t transfer_id, uint32_t index, uint64_t offset,
                                  absl::Span<const uint8_t> chunk) {
  {
    MutexLock lock(&mu_);
    auto t = transfers_.find(transfer_id);
    if (t != transfers_.end()) {
      // The scheduler sends a stream's chunks in offset order: nothing before this one is needed any more.
      auto c = t->second.cursors.find(index);
      if (c != t->second.cursors.end()) {
        Cursor& cursor = queue_.at(c->second);
        if (cursor.next_offset <= offset) {
          cursor.next_offset = offset + chunk.size();
          if (cursor.next_offset >= cursor.bytes.size()) {
            queue_.erase(c->second);
            t->second.cursors.erase(c);
          }
        }
      }
      auto r = t->second.ready.find({index, offset});
      if (r != t->second.ready.end()) {
        const uint32_t crc = r->second;
        t->second.ready.erase(r);
        return crc;
      }
    }
  }
  return Crc32c(chunk.data(), chunk.size());
}

void SendCrcPrecomputer::Forget(uint64_t transfer_id) {
  MutexLock lock(&mu_);
  auto t = transfers_.find(transfer_id);
  if (t != transfers_.end()) {
    for (const auto& [index, key] : t->second.cursors) queue_.erase(key);
    transfers_.erase(t);
  }
  mu_.Await([this, transfer_id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_.contains(transfer_id); });
}

uint64_t SendCrcPrecomputer::computed() const {
  MutexLock lock(&mu_);
  return computed_;
}

void SendCrcPrecomputer::Run() {
  bool have_result = false;  // the fields below hold a CRC computed outside the lock, not yet stored
  uint64_t transfer_id = 0;
  uint32_t index = 0;
  uint64_t offset = 0;
  uint32_t crc = 0;
  while (true) {
    absl::Span<const uint8_t> chunk;
    {
      MutexLock lock(&mu_);
      if (have_result) {
        auto t = transfers_.find(transfer_id);  // gone if forgotten meanwhile
        if (t != transfers_.end()) t->second.ready[{index, offset}] = crc;
        ++computed_;
        auto b = busy_.find(transfer_id);
        if (--b->second == 0) busy_.erase(b);
        have_result = false;
      }
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      auto it = queue_.begin();
      Cursor& cursor = it->second;
      transfer_id = cursor.transfer_id;
      index = cursor.index;
      offset = cursor.next_offset;
      chunk = cursor.bytes.subspan(offset, std::min<uint64_t>(chunk_bytes_, cursor.bytes.size() - offset));
      cursor.next_offset += chunk.size();
      if (cursor.next_offset >= cursor.bytes.size()) {
        auto t = transfers_.find(transfer_id);
        if (t != transfers_.end()) t->second.cursors.erase(index);
        queue_.erase(it);
      }
      ++busy_[transfer_id];
    }
    crc = Crc32c(chunk.data(), chunk.size());
    have_result = true;
  }
}

}  // namespace kvt::transport::internal
