#include "codec/internal/bitpack.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::codec::internal {
namespace {

TEST(BitpackTest, EveryWidthAndShiftRoundTripsForEveryLength) {
  std::mt19937 rng(1);
  for (int width = 1; width <= 8; ++width) {
    for (int shift = 0; shift + width <= 8; ++shift) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{31}, size_t{64}, size_t{1001}}) {
        std::vector<uint8_t> codes(n);
        for (auto& c : codes) c = static_cast<uint8_t>(rng());
        std::vector<uint8_t> packed(PackedSize(n, width) + 1, 0xEE);  // one guard byte
        PackField(codes.data(), n, shift, width, packed.data());
        ASSERT_EQ(packed.back(), 0xEE) << "wrote past PackedSize";
        std::vector<uint8_t> back(n, 0xFF);
        AppendField(packed.data(), n, width, /*first=*/true, back.data());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(back[i], (codes[i] >> shift) & ((1 << width) - 1)) << width << " " << shift << " " << i;
        }
      }
    }
  }
}

TEST(BitpackTest, Bmi2AndPortablePathsWriteTheSameBytes) {
  if (!Bmi2Available()) GTEST_SKIP() << "no BMI2";
  std::mt19937 rng(3);
  for (int width = 1; width <= 8; ++width) {
    for (int shift = 0; shift + width <= 8; ++shift) {
      for (size_t n : {size_t{1}, size_t{8}, size_t{9}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}}) {
        std::vector<uint8_t> codes(n);
        for (auto& c : codes) c = static_cast<uint8_t>(rng());
        std::vector<uint8_t> a(PackedSize(n, width)), b(a.size());
        PackFieldPortable(codes.data(), n, shift, width, a.data());
        PackFieldBmi2(codes.data(), n, shift, width, b.data());
        ASSERT_EQ(a, b) << width << " " << shift << " " << n;
        std::vector<uint8_t> pa(n), pb(n);
        for (size_t i = 0; i < n; ++i) pa[i] = pb[i] = codes[i] & ((1 << (8 - width)) - 1);
        AppendFieldPortable(a.data(), n, width, /*first=*/false, pa.data());
        AppendFieldBmi2(a.data(), n, width, /*first=*/false, pb.data());
        ASSERT_EQ(pa, pb) << width << " " << n;
      }
    }
  }
}

TEST(BitpackTest, Avx512NibblePathsMatchThePortableOnes) {
  if (!Avx512BwAvailable()) GTEST_SKIP() << "no AVX-512BW";
  std::mt19937 rng(4);
  for (int shift : {0, 2, 4}) {
    for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{128}, size_t{1001}}) {
      std::vector<uint8_t> codes(n);
      for (auto& c : codes) c = static_cast<uint8_t>(rng());
      std::vector<uint8_t> a(PackedSize(n, 4)), b(a.size());
      PackFieldPortable(codes.data(), n, shift, 4, a.data());
      PackNibblesAvx512(codes.data(), n, shift, b.data());
      ASSERT_EQ(a, b) << shift << " " << n;
      for (bool first : {true, false}) {
        std::vector<uint8_t> pa(n), pb(n);
        for (size_t i = 0; i < n; ++i) pa[i] = pb[i] = codes[i] & 15;
        AppendFieldPortable(a.data(), n, 4, first, pa.data());
        AppendNibblesAvx512(a.data(), n, first, pb.data());
        ASSERT_EQ(pa, pb) << n << " " << first;
      }
    }
  }
}

TEST(BitpackTest, FieldsAreLsbFirstAndTheLastByteIsZeroPadded) {
  const uint8_t codes[] = {0x5, 0x3, 0x6};
  uint8_t packed[2] = {0xFF, 0xFF};
  PackField(codes, 3, 0, 3, packed);  // bits: 101 110 011 -> 0b01_011_101, then 0b0000000_1
  EXPECT_EQ(packed[0], 0x9D);
  EXPECT_EQ(packed[1], 0x01);
  uint8_t nibbles[2] = {0, 0};
  const uint8_t four[] = {0x1A, 0x2B, 0x3C};
  PackField(four, 3, 4, 4, nibbles);  // high nibbles 1, 2, 3
  EXPECT_EQ(nibbles[0], 0x21);
  EXPECT_EQ(nibbles[1], 0x03);
}

TEST(BitpackTest, AppendingStreamsRebuildsTheCodeFromItsFields) {
  std::mt19937 rng(2);
  std::vector<uint8_t> codes(999);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  const int widths[] = {2, 2, 4};  // anchor, r1, r2 of lynx-a2r2r4
  std::vector<uint8_t> prefix(codes.size());
  int shift = 8;
  for (int i = 0; i < 3; ++i) {
    shift -= widths[i];
    std::vector<uint8_t> packed(PackedSize(codes.size(), widths[i]));
    PackField(codes.data(), codes.size(), shift, widths[i], packed.data());
    AppendField(packed.data(), codes.size(), widths[i], i == 0, prefix.data());
  }
  EXPECT_EQ(prefix, codes);
}

}  // namespace
}  // namespace kvt::codec::internal
