#include "transport/internal/receive_buffer_pool.h"

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::transport::internal {
namespace {

TEST(ReceiveBufferPoolTest, AReleasedBufferIsHandedOutAgain) {
  auto pool = std::make_shared<ReceiveBufferPool>(1024, 4);
  uint8_t* first = nullptr;
  {
    PayloadBuffer b = pool->Take(1024);
    first = b.get();
    EXPECT_EQ(pool->buffers(), 1u);
    EXPECT_EQ(pool->idle(), 0u);
  }
  EXPECT_EQ(pool->idle(), 1u);
  PayloadBuffer again = pool->Take(900);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(pool->buffers(), 1u);
}

TEST(ReceiveBufferPoolTest, NeverHoldsMoreThanItsLimit) {
  auto pool = std::make_shared<ReceiveBufferPool>(1024, 2);
  std::vector<PayloadBuffer> taken;
  for (int i = 0; i < 5; ++i) taken.push_back(pool->Take(1024));
  EXPECT_EQ(pool->buffers(), 2u);
  taken.clear();
  EXPECT_EQ(pool->idle(), 2u);
  EXPECT_EQ(pool->buffers(), 2u);
}

TEST(ReceiveBufferPoolTest, SmallAndOversizedPayloadsGetBuffersOfTheirOwn) {
  auto pool = std::make_shared<ReceiveBufferPool>(1024, 4);
  {
    PayloadBuffer small = pool->Take(100);
    PayloadBuffer large = pool->Take(4096);
    EXPECT_EQ(small.get_deleter().recycler, nullptr);
    EXPECT_EQ(large.get_deleter().recycler, nullptr);
  }
  EXPECT_EQ(pool->buffers(), 0u);
  EXPECT_EQ(pool->idle(), 0u);
}

TEST(ReceiveBufferPoolTest, OutstandingBuffersOutliveThePoolsOwner) {
  auto pool = std::make_shared<ReceiveBufferPool>(64, 1);
  PayloadBuffer b = pool->Take(64);
  b[63] = 7;
  pool.reset();  // the buffer still holds the pool; releasing it below must not touch freed memory
  EXPECT_EQ(b[63], 7);
}

TEST(ReceiveBufferPoolTest, BuffersReleasedOnOtherThreadsComeBack) {
  auto pool = std::make_shared<ReceiveBufferPool>(256, 8);
  for (int round = 0; round < 100; ++round) {
    std::vector<PayloadBuffer> taken;
    for (int i = 0; i < 8; ++i) taken.push_back(pool->Take(256));
    std::thread consumer([taken = std::move(taken)]() mutable { taken.clear(); });
    consumer.join();
  }
  EXPECT_EQ(pool->buffers(), 8u);
  EXPECT_EQ(pool->idle(), 8u);
}

}  // namespace
}  // namespace kvt::transport::internal
