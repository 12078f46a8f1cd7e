#include "codec/eval/safetensors.h"

#include <cstring>

#include "gtest/gtest.h"

namespace kvt::codec::eval {
namespace {

std::string File(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s + header + data;
}

std::string Floats(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size()); }

TEST(SafetensorsTest, ReadsF32F16AndBf16TensorsByName) {
  const std::string data = Floats({1.5f, -2.0f}) + std::string("\x00\x3c\x00\xc0", 4) +  // F16 1, -2
                           std::string("\xc0\x3f\x80\x40", 4);                          // BF16 1.5, 4
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]},)"
      R"( "b": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]},)"
      R"( "c": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [12, 16]}})";
  const std::string file = File(header, data);
  auto a = ParseSafetensors(file, "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(a->data, (std::vector<float>{1.5f, -2.0f}));
  auto b = ParseSafetensors(file, "b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(b->source_dtype, NpyDtype::kFloat16);
  auto c = ParseSafetensors(file, "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data, (std::vector<float>{1.5f, 4.0f}));
  EXPECT_EQ(c->source_dtype, NpyDtype::kBfloat16);
  EXPECT_EQ(*SafetensorsTensorNames(file), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(SafetensorsTest, AnUnnamedTensorIsTheOnlyOneOrAnErrorListingThem) {
  const std::string one = File(R"({"kv": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", Floats({3}));
  auto a = ParseSafetensors(one, "");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data[0], 3.0f);
  const std::string two = File(R"({"k": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                               R"( "v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                               Floats({1, 2}));
  auto b = ParseSafetensors(two, "");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("k, v"), std::string::npos) << b.status();
  auto c = ParseSafetensors(two, "q");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("k, v"), std::string::npos);
}

TEST(SafetensorsTest, MalformedFilesAreRejected) {
  const std::string four = Floats({1});
  const char* bad_headers[] = {
      "not json",
      "[1, 2]",
      R"({"x": 3})",
      R"({"x": {"shape": [1], "data_offsets": [0, 4]}})",
      R"({"x": {"dtype": "F32", "data_offsets": [0, 4]}})",
      R"({"x": {"dtype": "F32", "shape": [1]}})",
      R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})",
      R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
      R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})",
      R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
      R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
      R"({"x": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})",
      R"({"x": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})",
      R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})",
      R"({"x": {"dtype": "F32", "shape": [99999999999, 99999999999], "data_offsets": [0, 4]}})",
  };
  for (const char* h : bad_headers) {
    EXPECT_EQ(ParseSafetensors(File(h, four), "x").status().code(), absl::StatusCode::kInvalidArgument) << h;
  }
  auto dtype = ParseSafetensors(File(R"({"x": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})", four), "x");
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dtype.status().message().find("F32, F16 and BF16"), std::string::npos);
  EXPECT_EQ(ParseSafetensors("abc", "x").status().code(), absl::StatusCode::kInvalidArgument);
  std::string huge(8, '\xff');
  EXPECT_EQ(ParseSafetensors(huge + "{}", "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, EveryPrefixOfAValidFileIsRejectedWithoutCrashing) {
  const std::string file = File(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", Floats({1, 2}));
  for (size_t n = 0; n < file.size(); ++n) EXPECT_FALSE(ParseSafetensors(file.substr(0, n), "x").ok()) << n;
  EXPECT_TRUE(ParseSafetensors(file, "x").ok());
}

TEST(SafetensorsTest, MissingFilesAreNotFound) {
  EXPECT_EQ(ReadSafetensorsFile(std::string(testing::TempDir()) + "/nope.safetensors", "").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvt::codec::eval
