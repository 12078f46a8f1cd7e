#include "codec/eval/roundtrip.h"

#include <random>

#include "gtest/gtest.h"

namespace kvt::codec::eval {
namespace {

NpyArray RandomArray(std::vector<int64_t> shape, uint32_t seed) {
  NpyArray a;
  a.shape = std::move(shape);
  a.data.resize(a.num_values());
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  for (float& v : a.data) v = d(gen);
  return a;
}

TEST(RoundTripTest, EveryStageHasTheInputsShapeAndTheFullStageIsTheCodecDecode) {
  const NpyArray x = RandomArray({2, 2, 300, 2, 8}, 1);
  const Scheme lynx = *ParseScheme("lynx");
  auto r = RoundTrip(x, lynx, CodecOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->stages.size(), 2u);
  for (const NpyArray& s : r->stages) {
    EXPECT_EQ(s.shape, x.shape);
    EXPECT_EQ(s.data.size(), x.data.size());
  }
  EXPECT_NE(r->stages[0].data, r->stages[1].data) << "anchor-only must differ from the full decode";
  // Layer 1's V is the 4th [300, 16] tensor; its full decode is the codec's, page by page.
  const size_t offset = 3 * 300 * 16;
  auto enc = EncodeTensor(lynx, CodecOptions{}, TensorView{x.data.data() + offset, 300, 16});
  ASSERT_TRUE(enc.ok());
  std::vector<float> want(300 * 16);
  ASSERT_TRUE(DecodeTensor(*enc, 2, CodecOptions{}, want.data()).ok());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(r->stages[1].data[offset + i], want[i]) << i;
  EXPECT_EQ(r->stream_bytes[1], 4 * enc->StreamBytes(1)) << "four tensors, each the same residual size";
}

TEST(RoundTripTest, TwoDimensionalTensorsRoundTripThroughSingleStreamSchemes) {
  const NpyArray x = RandomArray({64, 10}, 2);
  auto r = RoundTrip(x, *ParseScheme("int8"), CodecOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->stages.size(), 1u);
  EXPECT_EQ(r->stages[0].shape, x.shape);
  double err = 0;
  for (size_t i = 0; i < x.data.size(); ++i) err = std::max(err, double{std::abs(x.data[i] - r->stages[0].data[i])});
  EXPECT_LT(err, 0.05);
}

TEST(RoundTripTest, ShapesOtherThanKvAreRejected) {
  EXPECT_EQ(RoundTrip(RandomArray({4, 4, 4}, 3), *ParseScheme("lynx"), CodecOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RoundTrip(RandomArray({1, 3, 4, 1, 2}, 3), *ParseScheme("lynx"), CodecOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RoundTripTest, FileNamesAreStagesThenFull) {
  EXPECT_EQ(RoundTripFileNames("/tmp/p", 3),
            (std::vector<std::string>{"/tmp/p.stage0.npy", "/tmp/p.stage1.npy", "/tmp/p.full.npy"}));
  EXPECT_EQ(RoundTripFileNames("x", 1), (std::vector<std::string>{"x.full.npy"}));
}

}  // namespace
}  // namespace kvt::codec::eval
