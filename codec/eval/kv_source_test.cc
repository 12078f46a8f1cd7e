#include "codec/eval/kv_source.h"

#include "gtest/gtest.h"

namespace kvt::codec::eval {
namespace {

NpyArray Iota(std::vector<int64_t> shape) {
  NpyArray a;
  a.shape = std::move(shape);
  a.data.resize(a.num_values());
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<float>(i);
  return a;
}

TEST(KvSourceTest, FiveDimensionalDumpGivesEachLayersKAndV) {
  auto src = MakeNpySource(Iota({3, 2, 4, 2, 5}), "dump.npy", 2);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->num_layers(), 3);
  EXPECT_TRUE((*src)->has_attention());
  const HeadLayout l = (*src)->layout();
  EXPECT_EQ(l.tokens, 4);
  EXPECT_EQ(l.kv_heads, 2);
  EXPECT_EQ(l.head_dim, 5);
  EXPECT_EQ(l.query_heads, 4);
  const LayerKv kv = (*src)->Layer(1);
  ASSERT_EQ(kv.k.size(), 40u);
  EXPECT_EQ(kv.k[0], 80.0f);   // layer 1, K, token 0, head 0, dim 0
  EXPECT_EQ(kv.v[0], 120.0f);  // layer 1, V
  EXPECT_EQ(kv.v[39], 159.0f);
  EXPECT_NE((*src)->Describe().find("[3, 2, 4, 2, 5]"), std::string::npos);
}

TEST(KvSourceTest, TwoDimensionalTensorHasNoAttention) {
  auto src = MakeNpySource(Iota({6, 4}), "k.npy");
  ASSERT_TRUE(src.ok());
  EXPECT_EQ((*src)->num_layers(), 1);
  EXPECT_FALSE((*src)->has_attention());
  const LayerKv kv = (*src)->Layer(0);
  EXPECT_EQ(kv.k.size(), 24u);
  EXPECT_TRUE(kv.v.empty());
}

TEST(KvSourceTest, OtherShapesAreRejectedWithTheExpectedOnes) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4}, {2, 3, 4}, {1, 3, 2, 2, 2}, {2, 2, 0, 1, 1}}) {
    auto src = MakeNpySource(Iota(shape), "x.npy");
    EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto src = MakeNpySource(Iota({2, 3, 4}), "x.npy");
  EXPECT_NE(src.status().message().find("[L, 2, T, H, D]"), std::string::npos);
}

TEST(KvSourceTest, SyntheticSourceMatchesTheGenerator) {
  auto o = SyntheticKvOptions::ForModel("tiny", 64);
  ASSERT_TRUE(o.ok());
  auto src = MakeSyntheticSource(*o);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ((*src)->num_layers(), 4);
  EXPECT_EQ((*src)->Layer(2).k, GenerateLayer(*o, 2).k);
  EXPECT_NE((*src)->Describe().find("tiny"), std::string::npos);
  o->tokens = 0;
  EXPECT_EQ(MakeSyntheticSource(*o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::codec::eval
