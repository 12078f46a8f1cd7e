#include "common/crc32c.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvt {
namespace {

TEST(Crc32c, MatchesPublishedCheckValue) {
  // RFC 3720 B.4 / the standard check value for "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, MatchesRfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, ExtendEqualsWholeBuffer) {
  std::string s = "the anchor goes first, the residual follows";
  for (size_t split = 0; split <= s.size(); ++split) {
    EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), split), s.data() + split, s.size() - split),
              Crc32c(s.data(), s.size()));
  }
}

TEST(Crc32c, LibraryAgreesWithTheReferenceOnRandomBuffers) {
  std::mt19937 rng(7);
  for (int len : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000, 4095, 4096, 65537}) {
    std::vector<uint8_t> buf(len);
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    EXPECT_EQ(Crc32c(buf.data(), len), internal::Crc32cPortable(0, buf.data(), len)) << "len " << len;
  }
}

TEST(Crc32c, LibraryAgreesWithTheReferenceAtEveryAlignmentAndSeed) {
  // The folding kernels work on 64- and 256-byte blocks with separate head and tail code: cover the lengths
  // around those blocks, from every offset within a cache line, continuing from a non-zero CRC.
  std::mt19937 rng(11);
  std::vector<uint8_t> buf(3 * 3 * 4096 + 128);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len : {size_t{31}, size_t{127}, size_t{128}, size_t{129}, size_t{511}, size_t{512}, size_t{513},
                     size_t{3 * 4096 - 1}, size_t{3 * 4096 + 1}, size_t{9 * 4096}}) {
    for (size_t offset = 0; offset < 64; offset += 7) {
      for (uint32_t seed : {0u, 0xDEADBEEFu, 0xFFFFFFFFu}) {
        EXPECT_EQ(Crc32cExtend(seed, buf.data() + offset, len),
                  internal::Crc32cPortable(seed, buf.data() + offset, len))
            << "len " << len << " offset " << offset << " seed " << seed;
      }
    }
  }
}

TEST(Crc32c, SingleBitFlipChangesChecksum) {
  std::vector<uint8_t> buf(4096, 0x5A);
  const uint32_t before = Crc32c(buf.data(), buf.size());
  buf[1234] ^= 0x10;
  EXPECT_NE(Crc32c(buf.data(), buf.size()), before);
}

}  // namespace
}  // namespace kvt
