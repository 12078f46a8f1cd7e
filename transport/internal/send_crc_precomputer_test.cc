#include "transport/internal/send_crc_precomputer.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::transport::internal {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 131 + (i >> 8));
  return v;
}

// Waits (generously) until the precomputer has computed `n` CRCs.
bool WaitComputed(const SendCrcPrecomputer& p, uint64_t n) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (p.computed() < n) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// Every test runs with one computing thread and with several.
class SendCrcPrecomputerTest : public ::testing::TestWithParam<int> {};

TEST_P(SendCrcPrecomputerTest, EveryChunkGetsItsOwnCrcWhetherPrecomputedOrNot) {
  constexpr uint32_t kChunk = 1000;
  const std::vector<uint8_t> a = Pattern(10 * kChunk + 7, 1);  // 11 chunks, the last short
  SendCrcPrecomputer p(kChunk, GetParam());
  p.Add(5, 0, 1, a);
  ASSERT_TRUE(WaitComputed(p, 11));
  for (uint64_t off = 0; off < a.size(); off += kChunk) {
    const absl::Span<const uint8_t> chunk =
        absl::MakeConstSpan(a).subspan(off, std::min<uint64_t>(kChunk, a.size() - off));
    EXPECT_EQ(p.Take(5, 0, off, chunk), Crc32c(chunk.data(), chunk.size())) << off;
  }
  // Taken once: asking again (not precomputed any more) still gives the right value.
  const absl::Span<const uint8_t> first = absl::MakeConstSpan(a).subspan(0, kChunk);
  EXPECT_EQ(p.Take(5, 0, 0, first), Crc32c(first.data(), first.size()));
}

TEST_P(SendCrcPrecomputerTest, UnknownStreamsAreComputedByTheCaller) {
  const std::vector<uint8_t> a = Pattern(4096, 9);
  SendCrcPrecomputer p(1024, GetParam());
  EXPECT_EQ(p.Take(77, 3, 0, absl::MakeConstSpan(a).subspan(0, 1024)), Crc32c(a.data(), 1024));
  EXPECT_EQ(p.computed(), 0u);
}

TEST_P(SendCrcPrecomputerTest, StreamsOnSeveralStagesAllComeBackRight) {
  constexpr uint32_t kChunk = 4096;
  const std::vector<uint8_t> residual = Pattern(400 * kChunk, 2);
  const std::vector<uint8_t> anchor = Pattern(2 * kChunk, 3);
  SendCrcPrecomputer p(kChunk, GetParam());
  p.Add(1, 0, 3, residual);
  p.Add(2, 0, 0, anchor);
  ASSERT_TRUE(WaitComputed(p, 402));
  EXPECT_EQ(p.Take(1, 0, 399 * kChunk, absl::MakeConstSpan(residual).subspan(399 * kChunk, kChunk)),
            Crc32c(residual.data() + 399 * kChunk, kChunk));
  for (uint64_t off = 0; off < anchor.size(); off += kChunk) {
    const absl::Span<const uint8_t> chunk = absl::MakeConstSpan(anchor).subspan(off, kChunk);
    EXPECT_EQ(p.Take(2, 0, off, chunk), Crc32c(chunk.data(), chunk.size()));
  }
}

TEST_P(SendCrcPrecomputerTest, ForgetStopsWorkOnATransferBeforeItsBytesGo) {
  constexpr uint32_t kChunk = 64 * 1024;
  auto bytes = std::make_unique<std::vector<uint8_t>>(Pattern(256 * kChunk, 4));
  SendCrcPrecomputer p(kChunk, GetParam());
  p.Add(9, 0, 1, *bytes);
  p.Forget(9);
  const uint64_t after_forget = p.computed();
  bytes.reset();  // the precomputer must not read them any more (checked under ASan)
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(p.computed(), after_forget);
}

INSTANTIATE_TEST_SUITE_P(Threads, SendCrcPrecomputerTest, ::testing::Values(1, 4));

}  // namespace
}  // namespace kvt::transport::internal
