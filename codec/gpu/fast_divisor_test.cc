// FastDivisor (codec/gpu/fast_divisor.h), the kernels' division by a launch-time divisor, against the division
// operator: every dividend below 2^16 for every divisor up to 1024 (the tile decoders' token and chunk indices
// and block sizes), the dividends around each multiple of the divisor near the top of the range, and random
// pairs over the whole domain. Host-only: the device runs the same code, with __umulhi for the multiply-high.
#include "codec/gpu/fast_divisor.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::codec::gpu::internal {
namespace {

constexpr int kMaxDividend = 0x7FFFFFFF;

void Check(int d, int x, int& misses) {
  const int got = FastDivisor::For(d).Divide(x);
  if (got != x / d && misses++ < 5) ADD_FAILURE() << x << " / " << d << ": " << got << " != " << x / d;
}

TEST(FastDivisorTest, EveryDividendBelow65536ForEveryDivisorUpTo1024) {
  int misses = 0;
  for (int d = 1; d <= 1024; ++d) {
    const FastDivisor f = FastDivisor::For(d);
    for (int x = 0; x < 65536; ++x) {
      if (f.Divide(x) != x / d && misses++ < 5) ADD_FAILURE() << x << " / " << d << ": " << f.Divide(x);
    }
  }
  EXPECT_EQ(misses, 0);
}

TEST(FastDivisorTest, DividendsAroundMultiplesNearTheTopOfTheRange) {
  int misses = 0;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> any(1, kMaxDividend);
  std::vector<int> divisors = {1, 2, 3, 5, 7, 16, 24, 255, 256, 257, 4095, 65535, 65536, 65537, 1 << 30,
                               (1 << 30) + 1, kMaxDividend - 1, kMaxDividend};
  for (int i = 0; i < 2000; ++i) divisors.push_back(any(rng));
  for (int d : divisors) {
    // The largest multiples of d in range, and the dividends one either side of them.
    const int top = kMaxDividend / d;
    for (int q = top; q >= 0 && q > top - 64; --q) {
      const int64_t base = static_cast<int64_t>(q) * d;
      for (int64_t x = base - 1; x <= base + 1; ++x) {
        if (x >= 0 && x <= kMaxDividend) Check(d, static_cast<int>(x), misses);
      }
    }
    Check(d, kMaxDividend, misses);
    Check(d, 0, misses);
  }
  EXPECT_EQ(misses, 0);
}

TEST(FastDivisorTest, RandomPairsOverTheWholeDomain) {
  int misses = 0;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> any(0, kMaxDividend);
  std::uniform_int_distribution<int> bits(0, 30);
  for (int i = 0; i < 2000000; ++i) {
    const int d = 1 + (any(rng) >> bits(rng));  // divisors of every magnitude
    Check(d, any(rng), misses);
  }
  EXPECT_EQ(misses, 0);
}

TEST(FastDivisorTest, DivisorOneIsTheIdentity) {
  const FastDivisor f = FastDivisor::For(1);
  EXPECT_EQ(f.is_one, 1u);
  for (int x : {0, 1, 2, 12345, kMaxDividend}) EXPECT_EQ(f.Divide(x), x);
}

}  // namespace
}  // namespace kvt::codec::gpu::internal
