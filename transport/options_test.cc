#include "transport/options.h"

#include "gtest/gtest.h"

namespace kvt::transport {
namespace {

TEST(OptionsTest, DefaultsAreValidAndFillBurstAndClock) {
  auto o = ValidateOptions(Options{});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->burst_bytes, 2 * (int64_t{Options{}.chunk_bytes} + 40));
  EXPECT_EQ(o->clock, RealClock());
}

TEST(OptionsTest, ReceiveBufferBelowOneChunkIsInvalidArgument) {
  Options o;
  o.chunk_bytes = 1 << 20;
  o.max_receive_buffer_bytes = 1 << 20;  // the header does not fit
  EXPECT_EQ(ValidateOptions(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OptionsTest, BadFieldsAreInvalidArgument) {
  Options zero_chunk;
  zero_chunk.chunk_bytes = 0;
  EXPECT_EQ(ValidateOptions(zero_chunk).status().code(), absl::StatusCode::kInvalidArgument);
  Options negative_rate;
  negative_rate.rate_bytes_per_second = -1;
  EXPECT_EQ(ValidateOptions(negative_rate).status().code(), absl::StatusCode::kInvalidArgument);
  Options heartbeat_too_slow;
  heartbeat_too_slow.heartbeat_interval = absl::Seconds(5);
  heartbeat_too_slow.peer_timeout = absl::Seconds(1);
  EXPECT_EQ(ValidateOptions(heartbeat_too_slow).status().code(), absl::StatusCode::kInvalidArgument);
  for (int workers : {0, -3, 17}) {
    Options o;
    o.ucx_workers = workers;
    auto v = ValidateOptions(o);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << workers;
    EXPECT_NE(v.status().message().find("ucx_workers"), absl::string_view::npos) << v.status();
  }
  Options sixteen;
  sixteen.ucx_workers = 16;
  EXPECT_TRUE(ValidateOptions(sixteen).ok());
}

TEST(OptionsTest, ChunkBytesFromKibTakesOneKibToTheLargestChunkAndNamesTheFlagOtherwise) {
  EXPECT_EQ(*ChunkBytesFromKib(1, "--chunk-kib"), 1024u);
  EXPECT_EQ(*ChunkBytesFromKib(kMaxChunkKib, "--chunk-kib"), kMaxChunkKib << 10);
  for (int64_t kib : {int64_t{0}, int64_t{-1}, int64_t{kMaxChunkKib} + 1, int64_t{1} << 40}) {
    const absl::StatusOr<uint32_t> got = ChunkBytesFromKib(kib, "--chunk_kib");
    ASSERT_FALSE(got.ok()) << kib;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find("--chunk_kib"), absl::string_view::npos) << got.status();
  }
}

}  // namespace
}  // namespace kvt::transport
