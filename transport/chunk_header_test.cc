#include "transport/chunk_header.h"

#include <array>
#include <cstring>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::transport {
namespace {

ChunkHeader Sample() {
  ChunkHeader h;
  h.transfer_id = 0x0123456789abcdefull;
  h.page = 77;
  h.stage = 2;
  h.offset = 3u << 20;
  h.length = 1u << 20;
  h.payload_crc32c = 0xdeadbeef;
  return h;
}

std::array<uint8_t, kChunkHeaderBytes> Encoded(const ChunkHeader& h) {
  std::array<uint8_t, kChunkHeaderBytes> b{};
  EncodeChunkHeader(h, absl::MakeSpan(b));
  return b;
}

// Rewrites the header CRC so that a deliberately altered field reaches the field checks.
void Reseal(std::array<uint8_t, kChunkHeaderBytes>& b) {
  const uint32_t crc = Crc32c(b.data(), 36);
  std::memcpy(b.data() + 36, &crc, 4);
}

TEST(ChunkHeaderTest, EncodedHeaderDecodesToTheSameFields) {
  const auto b = Encoded(Sample());
  auto decoded = DecodeChunkHeader(b);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, Sample());
}

TEST(ChunkHeaderTest, LayoutMatchesTheDocumentedOffsets) {
  const auto b = Encoded(Sample());
  EXPECT_EQ(b[0], 'K');
  EXPECT_EQ(b[1], 'V');
  EXPECT_EQ(b[2], 'T');
  EXPECT_EQ(b[3], 'C');
  EXPECT_EQ(b[4], kChunkVersion);
  EXPECT_EQ(b[5], 2);
  EXPECT_EQ(b[16], 77);
  EXPECT_EQ(b[8], 0xef);
}

TEST(ChunkHeaderTest, EveryFlippedBitIsRejected) {
  const auto good = Encoded(Sample());
  for (size_t bit = 0; bit < kChunkHeaderBytes * 8; ++bit) {
    auto b = good;
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(DecodeChunkHeader(b).ok()) << "bit " << bit;
  }
}

TEST(ChunkHeaderTest, WrongSizeIsInvalidArgument) {
  const auto b = Encoded(Sample());
  EXPECT_EQ(DecodeChunkHeader(absl::MakeConstSpan(b.data(), 39)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeChunkHeader({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkHeaderTest, CorruptHeaderCrcIsDataLoss) {
  auto b = Encoded(Sample());
  b[10] ^= 1;
  EXPECT_EQ(DecodeChunkHeader(b).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ChunkHeaderTest, StageOutOfRangeIsInvalidArgumentEvenWithAValidCrc) {
  auto b = Encoded(Sample());
  b[5] = kMaxStages;
  Reseal(b);
  EXPECT_EQ(DecodeChunkHeader(b).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkHeaderTest, OffsetPlusLengthOverflowIsInvalidArgument) {
  ChunkHeader h = Sample();
  h.offset = std::numeric_limits<uint64_t>::max() - 10;
  h.length = 11;
  EXPECT_EQ(DecodeChunkHeader(Encoded(h)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkHeaderTest, UnknownVersionMagicAndFlagsAreInvalidArgument) {
  for (int field : {0, 4, 6}) {
    auto b = Encoded(Sample());
    b[field] ^= 0x40;
    Reseal(b);
    EXPECT_EQ(DecodeChunkHeader(b).status().code(), absl::StatusCode::kInvalidArgument) << "byte " << field;
  }
}

}  // namespace
}  // namespace kvt::transport
