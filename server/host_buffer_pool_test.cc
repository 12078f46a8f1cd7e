// HostBufferPool: reuse of released buffers by size and kind, the cap on what it keeps, buffers outliving the
// pool's owner, and pinned requests falling back to pageable memory where nothing can pin (CI has no GPU).
#include "server/host_buffer_pool.h"

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::server {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HostBufferPool, AReleasedBufferServesTheNextRequestOfASimilarSize) {
  auto pool = HostBufferPool::Create({});
  uint8_t* first = nullptr;
  {
    std::shared_ptr<HostBuffer> b = pool->Acquire(5 * kMiB, HostMemory::kPageable);
    ASSERT_NE(b, nullptr);
    EXPECT_GE(b->size(), 5 * kMiB);
    std::memset(b->data(), 1, b->size());  // writable, all of it
    first = b->data();
    EXPECT_EQ(pool->stats().leased_bytes, b->size());
  }
  EXPECT_EQ(pool->stats().leased_bytes, 0u);
  EXPECT_GT(pool->stats().kept_bytes, 0u);
  std::shared_ptr<HostBuffer> again = pool->Acquire(4 * kMiB, HostMemory::kPageable);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(pool->stats().reused, 1u);
  // Far smaller than a kept buffer (more than 4 times as large): a new one, not most of a buffer wasted.
  std::shared_ptr<HostBuffer> small = pool->Acquire(1, HostMemory::kPageable);
  EXPECT_NE(small->data(), first);
  EXPECT_EQ(pool->stats().reused, 1u);
  EXPECT_EQ(pool->stats().acquired, 3u);
}

TEST(HostBufferPool, KindsAreKeptApartAndPinnedFallsBackToPageableWithoutAGpu) {
  auto pool = HostBufferPool::Create({});
  std::shared_ptr<HostBuffer> pinned = pool->Acquire(kMiB, HostMemory::kPinned);
  ASSERT_NE(pinned, nullptr);
  std::memset(pinned->data(), 2, pinned->size());
  const bool really_pinned = pinned->pinned();
  uint8_t* p = pinned->data();
  pinned.reset();
  // A pageable request never gets a pinned buffer's memory, nor the reverse (unless pinning fell back).
  std::shared_ptr<HostBuffer> pageable = pool->Acquire(kMiB, HostMemory::kPageable);
  EXPECT_FALSE(pageable->pinned());
  if (really_pinned) {
    EXPECT_NE(pageable->data(), p);
  }
}

TEST(HostBufferPool, BuffersBeyondTheCapAreFreedNotKept) {
  auto pool = HostBufferPool::Create({.max_kept_bytes = 4 * kMiB});
  {
    std::shared_ptr<HostBuffer> a = pool->Acquire(4 * kMiB, HostMemory::kPageable);
    std::shared_ptr<HostBuffer> b = pool->Acquire(4 * kMiB, HostMemory::kPageable);
  }
  EXPECT_EQ(pool->stats().kept_bytes, 4 * kMiB);
  EXPECT_EQ(pool->stats().allocated_bytes, 8 * kMiB);
}

TEST(HostBufferPool, ABufferMayOutliveThePoolsOwner) {
  auto pool = HostBufferPool::Create({});
  std::shared_ptr<HostBuffer> b = pool->Acquire(kMiB, HostMemory::kPageable);
  pool.reset();
  std::memset(b->data(), 3, b->size());
  b.reset();  // returns into a pool nobody else holds, then the pool goes: no crash, nothing leaked (ASan)
}

TEST(HostBufferPool, ConcurrentAcquiresAndReleasesBalance) {
  auto pool = HostBufferPool::Create({.max_kept_bytes = 64 * kMiB});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 200; ++i) {
        std::shared_ptr<HostBuffer> b = pool->Acquire((1 + (i + t) % 3) * kMiB, HostMemory::kPageable);
        b->data()[0] = static_cast<uint8_t>(i);
      }
    });
  }
  for (auto& th : threads) th.join();
  const HostBufferPoolStats s = pool->stats();
  EXPECT_EQ(s.acquired, 800u);
  EXPECT_EQ(s.leased_bytes, 0u);
  EXPECT_GT(s.reused, 700u);  // at most a handful of buffers per thread were ever allocated
}

}  // namespace
}  // namespace kvt::server
