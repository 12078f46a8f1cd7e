#include "codec/eval/npy.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace kvt::codec::eval {
namespace {

std::string Header(absl::string_view dict, char major = 1) {
  std::string s("\x93NUMPY", 6);
  s.push_back(major);
  s.push_back('\0');
  s.push_back(static_cast<char>(dict.size() & 0xFF));
  s.push_back(static_cast<char>(dict.size() >> 8));
  if (major != 1) s.append(2, '\0');
  s.append(dict.data(), dict.size());
  return s;
}

TEST(NpyTest, Float32RoundTripKeepsShapeAndExactValues) {
  NpyArray a;
  a.shape = {2, 3};
  a.data = {1.0f, -2.5f, 0.0f, -0.0f, 1e-30f, 3.4e38f};
  auto bytes = SerializeNpy(a);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ((bytes->size() - 6 * 4) % 64, 0u) << "data must start on a 64-byte boundary";
  auto b = ParseNpy(*bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape, a.shape);
  ASSERT_EQ(b->data.size(), a.data.size());
  for (size_t i = 0; i < a.data.size(); ++i) {
    EXPECT_EQ(std::signbit(b->data[i]), std::signbit(a.data[i]));
    EXPECT_EQ(b->data[i], a.data[i]);
  }
  EXPECT_EQ(b->source_dtype, NpyDtype::kFloat32);
}

TEST(NpyTest, Float16RoundTripRoundsToNearestHalf) {
  NpyArray a;
  a.shape = {5};
  a.data = {1.0f, 0.333333f, -65504.0f, 6.0e-8f, 1e6f};
  auto bytes = SerializeNpy(a, NpyDtype::kFloat16);
  ASSERT_TRUE(bytes.ok());
  auto b = ParseNpy(*bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->source_dtype, NpyDtype::kFloat16);
  EXPECT_EQ(b->shape, std::vector<int64_t>{5});
  EXPECT_EQ(b->data[0], 1.0f);
  EXPECT_FLOAT_EQ(b->data[1], 0.333251953125f);  // nearest half to 1/3
  EXPECT_EQ(b->data[2], -65504.0f);
  EXPECT_FLOAT_EQ(b->data[3], 5.9604644775390625e-8f);  // the smallest subnormal half
  EXPECT_TRUE(std::isinf(b->data[4]));
}

TEST(NpyTest, HalfConversionIsExactForEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = HalfToFloat(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), bits) << "half 0x" << std::hex << h;
  }
}

TEST(NpyTest, HalfRoundingTiesGoToEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to the even mantissa (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
}

TEST(NpyTest, ParsesVersion2HeadersAndOneDimensionalShapes) {
  std::string bytes = Header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 2);
  const float v[2] = {3.0f, -1.0f};
  bytes.append(reinterpret_cast<const char*>(v), sizeof(v));
  auto a = ParseNpy(bytes);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, std::vector<int64_t>{2});
  EXPECT_EQ(a->data[1], -1.0f);
}

TEST(NpyTest, FiveDimensionalShapeIsRead) {
  NpyArray a;
  a.shape = {2, 2, 3, 1, 2};
  a.data.resize(24);
  for (int i = 0; i < 24; ++i) a.data[i] = static_cast<float>(i);
  auto b = ParseNpy(*SerializeNpy(a));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->shape, a.shape);
  EXPECT_EQ(b->data[23], 23.0f);
}

TEST(NpyTest, BadMagicIsRejected) {
  auto a = ParseNpy("\x93NUMPX\x01\x00\x00\x00");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("magic"), std::string::npos);
  EXPECT_EQ(ParseNpy("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, UnsupportedDtypesAreRejectedWithAHint) {
  for (const char* descr : {"<f8", ">f4", "<i4", "|u1", "<c8"}) {
    std::string bytes = Header(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (1,), }");
    bytes.append(8, '\0');
    auto a = ParseNpy(bytes);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << descr;
    EXPECT_NE(a.status().message().find("float32"), std::string::npos) << a.status();
  }
}

TEST(NpyTest, FortranOrderIsRejected) {
  std::string bytes = Header("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }");
  bytes.append(4, '\0');
  auto a = ParseNpy(bytes);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("Fortran"), std::string::npos);
}

TEST(NpyTest, TruncatedDataIsRejected) {
  std::string bytes = Header("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }");
  bytes.append(4 * 15, '\0');
  auto a = ParseNpy(bytes);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("truncated"), std::string::npos);
}

TEST(NpyTest, TrailingBytesAreRejected) {
  std::string bytes = Header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }");
  bytes.append(5, '\0');
  EXPECT_EQ(ParseNpy(bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, MalformedHeadersAreRejected) {
  const char* bad[] = {
      "{'descr': '<f4', 'fortran_order': False}",                         // no shape
      "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",       // negative dimension
      "{'descr': '<f4', 'fortran_order': maybe, 'shape': (1,), }",        // not a bool
      "{'descr': '<f4', 'fortran_order': False, 'shape': [1], }",         // list, not tuple
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",  // unknown key
      "{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }",         // broken quoting
      "['descr']",                                                        // not a dict
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} extra",    // trailing junk
      "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999,), }",  // overflow
      "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",          // scalar
  };
  for (const char* dict : bad) {
    std::string bytes = Header(dict);
    bytes.append(4, '\0');
    EXPECT_EQ(ParseNpy(bytes).status().code(), absl::StatusCode::kInvalidArgument) << dict;
  }
}

TEST(NpyTest, HeaderLengthBeyondTheFileIsRejected) {
  std::string bytes("\x93NUMPY\x01\x00\xff\x00{'descr'", 17);
  EXPECT_EQ(ParseNpy(bytes).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNpy(std::string("\x93NUMPY\x04\x00\x10\x00", 10)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, EveryPrefixOfAValidFileIsRejectedWithoutCrashing) {
  NpyArray a;
  a.shape = {3, 2};
  a.data.assign(6, 1.5f);
  const std::string bytes = *SerializeNpy(a, NpyDtype::kFloat16);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ParseNpy(absl::string_view(bytes.data(), n)).ok()) << n;
  }
  EXPECT_TRUE(ParseNpy(bytes).ok());
}

TEST(NpyTest, SerializeRejectsDataThatDisagreesWithShape) {
  NpyArray a;
  a.shape = {2, 2};
  a.data.assign(3, 0.0f);
  EXPECT_EQ(SerializeNpy(a).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, Bfloat16IsNeverWritten) {
  NpyArray a;
  a.shape = {1};
  a.data = {1.0f};
  EXPECT_EQ(SerializeNpy(a, NpyDtype::kBfloat16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(numerics::DTypeName(NpyDtype::kBfloat16), "bfloat16");
}

TEST(NpyTest, FilesRoundTripAndMissingFilesAreNotFound) {
  const std::string path = std::string(testing::TempDir()) + "/npy_test.npy";
  NpyArray a;
  a.shape = {1, 2};
  a.data = {7.0f, 8.0f};
  ASSERT_TRUE(WriteNpyFile(path, a).ok());
  auto b = ReadNpyFile(path);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data, a.data);
  std::remove(path.c_str());
  EXPECT_EQ(ReadNpyFile(path).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvt::codec::eval
