#include "codec/eval/tensor_codec.h"

#include <random>

#include "gtest/gtest.h"

namespace kvt::codec::eval {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (float& v : x) v = d(gen);
  return x;
}

TEST(TensorCodecTest, PlanCutsWholePagesThenWholeChunksThenAShortTail) {
  using Pages = std::vector<std::pair<int, int>>;
  EXPECT_EQ(*PlanPages(512, 256, 32), (Pages{{0, 256}, {256, 256}}));
  EXPECT_EQ(*PlanPages(300, 256, 32), (Pages{{0, 256}, {256, 32}, {288, 12}}));
  EXPECT_EQ(*PlanPages(20, 256, 32), (Pages{{0, 20}}));
  EXPECT_EQ(*PlanPages(320, 256, 32), (Pages{{0, 256}, {256, 64}}));
}

TEST(TensorCodecTest, PlanRejectsPagesThatAreNotWholeChunks) {
  EXPECT_EQ(PlanPages(100, 250, 32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanPages(100, 16, 32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanPages(0, 256, 32).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorCodecTest, TensorDecodeEqualsThePageByPageCodecDecode) {
  const int tokens = 300, channels = 24;
  const std::vector<float> x = Random(tokens * channels, 1);
  const Scheme scheme = *ParseScheme("lynx");
  const CodecOptions options;
  // 256-token pages of 16-token chunks (lynx's own): 256, then 32 (whole chunks), then the 12 left.
  auto enc = EncodeTensor(scheme, options, TensorView{x.data(), tokens, channels}, 256);
  ASSERT_TRUE(enc.ok()) << enc.status();
  ASSERT_EQ(enc->encoded.size(), 3u);
  for (int stages = 1; stages <= 2; ++stages) {
    std::vector<float> out(x.size(), -1.0f);
    ASSERT_TRUE(DecodeTensor(*enc, stages, options, out.data()).ok());
    for (const auto& [start, n] : enc->pages) {
      auto page = EncodePage(scheme, options, PageView{x.data() + start * channels, n, channels, 0});
      ASSERT_TRUE(page.ok());
      std::vector<float> want(n * channels);
      ASSERT_TRUE(DecodePage(page->bytes, stages, MutablePageView{want.data(), n, channels, 0}, options).ok());
      for (int i = 0; i < n * channels; ++i) ASSERT_EQ(out[start * channels + i], want[i]) << start << " " << i;
    }
  }
}

TEST(TensorCodecTest, StreamBytesSumTheContainersStreams) {
  const std::vector<float> x = Random(512 * 8, 2);
  auto enc = EncodeTensor(*ParseScheme("lynx-a2r2r4"), CodecOptions{}, TensorView{x.data(), 512, 8});
  ASSERT_TRUE(enc.ok());
  size_t total = 0;
  for (int i = 0; i < 3; ++i) total += enc->StreamBytes(i);
  size_t containers = 0;
  for (const EncodedPage& p : enc->encoded) containers += p.bytes.size();
  EXPECT_EQ(total, containers);
  EXPECT_EQ(enc->StreamBytes(2), 2 * enc->StreamBytes(1)) << "4-bit vs 2-bit residual streams";
}

TEST(TensorCodecTest, DecodeRejectsStagesOutsideTheStreams) {
  const std::vector<float> x = Random(32 * 4, 3);
  auto enc = EncodeTensor(*ParseScheme("int8"), CodecOptions{}, TensorView{x.data(), 32, 4});
  ASSERT_TRUE(enc.ok());
  std::vector<float> out(x.size());
  EXPECT_EQ(DecodeTensor(*enc, 2, CodecOptions{}, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeTensor(*enc, 0, CodecOptions{}, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorCodecTest, CodecErrorsNameThePage) {
  std::vector<float> x = Random(64 * 4, 4);
  x[40 * 4] = std::numeric_limits<float>::quiet_NaN();
  auto enc = EncodeTensor(*ParseScheme("lynx"), CodecOptions{}, TensorView{x.data(), 64, 4}, 32);
  EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(enc.status().message().find("page at token 32"), std::string::npos) << enc.status();
}

}  // namespace
}  // namespace kvt::codec::eval
