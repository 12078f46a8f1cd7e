#include "transport/token_bucket.h"

#include "gtest/gtest.h"
#include "transport/fake_clock.h"

namespace kvt::transport {
namespace {

TEST(TokenBucketTest, UnlimitedBucketAdmitsEverythingAtOnce) {
  FakeClock clock;
  TokenBucket bucket(0, 0, &clock);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(bucket.TryTake(1 << 30));
  EXPECT_EQ(bucket.TimeUntilAvailable(1 << 30), absl::ZeroDuration());
}

TEST(TokenBucketTest, StartsFullAndAdmitsOneBurst) {
  FakeClock clock;
  TokenBucket bucket(1000.0, 500, &clock);
  EXPECT_TRUE(bucket.TryTake(500));
  EXPECT_FALSE(bucket.TryTake(1));
}

TEST(TokenBucketTest, RefillsAtTheConfiguredRate) {
  FakeClock clock;
  TokenBucket bucket(1000.0, 500, &clock);
  ASSERT_TRUE(bucket.TryTake(500));
  EXPECT_EQ(bucket.TimeUntilAvailable(100), absl::Milliseconds(100));
  clock.Advance(absl::Milliseconds(99));
  EXPECT_FALSE(bucket.TryTake(100));
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(bucket.TryTake(100));
}

TEST(TokenBucketTest, NeverHoldsMoreThanTheBurst) {
  FakeClock clock;
  TokenBucket bucket(1000.0, 500, &clock);
  clock.Advance(absl::Hours(1));
  EXPECT_DOUBLE_EQ(bucket.tokens(), 500.0);
}

TEST(TokenBucketTest, MessageLargerThanBurstGoesWhenFullAndIsRepaidAsDebt) {
  FakeClock clock;
  TokenBucket bucket(1000.0, 100, &clock);
  EXPECT_TRUE(bucket.TryTake(1000));
  EXPECT_DOUBLE_EQ(bucket.tokens(), -900.0);
  // The debt (900) plus the next message's admission level (100) takes one second at 1000 B/s.
  EXPECT_EQ(bucket.TimeUntilAvailable(1000), absl::Seconds(1));
}

TEST(TokenBucketTest, LongRunRateEqualsTheConfiguredRate) {
  FakeClock clock;
  const double rate = 125e6;  // 1 Gbit/s
  TokenBucket bucket(rate, 1 << 20, &clock);
  const int64_t chunk = 256 << 10;
  int64_t sent = 0;
  const absl::Duration span = absl::Seconds(10);
  absl::Duration elapsed;
  while (elapsed < span) {
    const absl::Duration wait = bucket.TimeUntilAvailable(chunk);
    if (wait > absl::ZeroDuration()) {
      clock.Advance(wait);
      elapsed += wait;
      continue;
    }
    ASSERT_TRUE(bucket.TryTake(chunk));
    sent += chunk;
  }
  const double achieved = sent / absl::ToDoubleSeconds(elapsed);
  // Exact up to the initial burst and one chunk at the end.
  EXPECT_NEAR(achieved, rate, (2 << 20) / absl::ToDoubleSeconds(span));
}

}  // namespace
}  // namespace kvt::transport
