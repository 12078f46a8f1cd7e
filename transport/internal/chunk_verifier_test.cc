#include "transport/internal/chunk_verifier.h"

#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"
#include "transport/internal/mutex.h"
#include "transport/internal/receive_buffer_pool.h"

namespace kvt::transport::internal {
namespace {

VerifiedChunk MakeChunk(uint64_t offset, uint32_t length, bool corrupt) {
  VerifiedChunk c;
  c.link = 7;
  c.header.transfer_id = 1;
  c.header.offset = offset;
  c.header.length = length;
  c.payload = PayloadBuffer(new uint8_t[length]);
  for (uint32_t i = 0; i < length; ++i) c.payload[i] = static_cast<uint8_t>(offset + i * 31);
  c.header.payload_crc32c = Crc32c(c.payload.get(), length);
  if (corrupt) c.payload[length / 2] ^= 0x40;
  c.wire_bytes = length + 40;
  c.crc_ok = !corrupt;  // the verifier must set it itself
  return c;
}

// Takes verified chunks until `n` have come back (generous deadline).
std::vector<VerifiedChunk> TakeN(ChunkVerifier& v, size_t n) {
  std::vector<VerifiedChunk> out;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (out.size() < n && absl::Now() < give_up) {
    for (VerifiedChunk& c : v.TakeVerified()) out.push_back(std::move(c));
    if (out.size() < n) absl::SleepFor(absl::Milliseconds(1));
  }
  return out;
}

// Every test runs with one checking thread and with several.
class ChunkVerifierTest : public ::testing::TestWithParam<int> {};

TEST_P(ChunkVerifierTest, GoodChunksPassAndCorruptOnesFail) {
  ChunkVerifier v([] {}, GetParam());
  v.Submit(MakeChunk(0, 4096, /*corrupt=*/false));
  VerifiedChunk bad = MakeChunk(4096, 4096, /*corrupt=*/true);
  bad.crc_ok = true;  // stale value: the verifier decides
  v.Submit(std::move(bad));
  std::vector<VerifiedChunk> out = TakeN(v, 2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].crc_ok);
  EXPECT_FALSE(out[1].crc_ok);
  EXPECT_EQ(out[1].link, 7u);
  EXPECT_EQ(out[1].wire_bytes, 4096 + 40);
}

TEST_P(ChunkVerifierTest, ChunksComeBackInTheOrderSubmitted) {
  ChunkVerifier v([] {}, GetParam());
  constexpr int kChunks = 200;
  // Sizes far apart, so that with several threads later small chunks finish before earlier large ones.
  for (int i = 0; i < kChunks; ++i) {
    v.Submit(MakeChunk(static_cast<uint64_t>(i) * 1000, i % 5 == 0 ? (256 << 10) : 1000 + (i % 7) * 100,
                       i % 13 == 0));
  }
  std::vector<VerifiedChunk> out = TakeN(v, kChunks);
  ASSERT_EQ(out.size(), static_cast<size_t>(kChunks));
  for (int i = 0; i < kChunks; ++i) {
    EXPECT_EQ(out[i].header.offset, static_cast<uint64_t>(i) * 1000);
    EXPECT_EQ(out[i].crc_ok, i % 13 != 0) << i;
  }
}

// The wake-up follows every release of chunks: once per chunk with one thread; with several, a release may hand
// back more than one chunk, so at least once and at most once per chunk.
TEST_P(ChunkVerifierTest, VerifiedChunksCallTheWakeUp) {
  Mutex mu;
  int calls = 0;
  ChunkVerifier v(
      [&] {
        MutexLock lock(&mu);
        ++calls;
      },
      GetParam());
  for (int i = 0; i < 3; ++i) v.Submit(MakeChunk(i * 64, 64, false));
  ASSERT_EQ(TakeN(v, 3).size(), 3u);
  MutexLock lock(&mu);
  mu.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return calls >= 1; }, absl::Seconds(30));
  if (GetParam() == 1) {
    mu.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return calls == 3; }, absl::Seconds(30));
    EXPECT_EQ(calls, 3);
  } else {
    EXPECT_GE(calls, 1);
    EXPECT_LE(calls, 3);
  }
}

TEST_P(ChunkVerifierTest, StoppingReleasesTheBuffersOfChunksNotYetTaken) {
  auto pool = std::make_shared<ReceiveBufferPool>(4096, 50);
  auto v = std::make_unique<ChunkVerifier>([] {}, GetParam());
  for (int i = 0; i < 50; ++i) {
    VerifiedChunk c = MakeChunk(i * 4096, 4096, false);
    c.payload = pool->Take(4096);
    v->Submit(std::move(c));
  }
  v.reset();
  EXPECT_EQ(pool->buffers(), 50u);
  EXPECT_EQ(pool->idle(), 50u);
}

INSTANTIATE_TEST_SUITE_P(Threads, ChunkVerifierTest, ::testing::Values(1, 4));

}  // namespace
}  // namespace kvt::transport::internal
