#include "kv/kv_layout.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace kvt::kv {
namespace {

// Llama-3.1-8B-like: 32 layers, 8 KV heads of 128, bf16, 16-token blocks, 100 blocks, dense.
KvLayoutSpec DenseSpec() {
  KvLayoutSpec s;
  s.num_layers = 32;
  s.num_blocks = 100;
  s.block_tokens = 16;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.dtype = KvDType::kBfloat16;
  s.order = BlockOrder::kNhd;
  s.kv_stride_bytes = uint64_t{100} * 16 * 8 * 128 * 2;
  s.layer_stride_bytes = 2 * s.kv_stride_bytes;
  return s;
}

uint64_t DenseBytes(const KvLayoutSpec& s) { return s.layer_stride_bytes * s.num_layers; }

TEST(KvLayout, DenseLayoutFitsExactlyItsRegion) {
  KvLayoutSpec s = DenseSpec();
  absl::StatusOr<KvLayout> layout = KvLayout::Create(s, DenseBytes(s));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->block_bytes(), 16u * 8 * 128 * 2);
  // Last block of the last layer's V ends exactly at the region's end.
  EXPECT_EQ(layout->BlockOffset(31, 1, 99) + layout->block_bytes(), DenseBytes(s));
}

TEST(KvLayout, RegionOneByteShortIsRejected) {
  KvLayoutSpec s = DenseSpec();
  absl::StatusOr<KvLayout> layout = KvLayout::Create(s, DenseBytes(s) - 1);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("needs"), absl::string_view::npos) << layout.status();
}

TEST(KvLayout, ZeroAndHugeDimensionsAreRejectedByName) {
  KvLayoutSpec s = DenseSpec();
  s.head_dim = 0;
  absl::Status st = KvLayout::Create(s, DenseBytes(s)).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head_dim"), absl::string_view::npos) << st;
  s = DenseSpec();
  s.num_blocks = kMaxBlocks + 1;
  st = KvLayout::Create(s, UINT64_MAX).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_blocks"), absl::string_view::npos) << st;
}

TEST(KvLayout, StridesThatOverlapTensorsAreRejected) {
  KvLayoutSpec s = DenseSpec();
  s.kv_stride_bytes -= 2;  // K would overlap V
  EXPECT_EQ(KvLayout::Create(s, UINT64_MAX).status().code(), absl::StatusCode::kInvalidArgument);
  s = DenseSpec();
  s.layer_stride_bytes = s.kv_stride_bytes;  // V would overlap the next layer's K
  EXPECT_EQ(KvLayout::Create(s, UINT64_MAX).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvLayout, ExtentThatOverflowsSixtyFourBitsIsRejected) {
  KvLayoutSpec s = DenseSpec();
  s.layer_stride_bytes = UINT64_MAX / 2;
  s.num_layers = 1024;
  absl::Status st = KvLayout::Create(s, UINT64_MAX).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("overflows"), absl::string_view::npos) << st;
}

TEST(KvLayout, HeadRangeMustLieInsideTheModelsHeads) {
  KvLayoutSpec s = DenseSpec();
  s.total_kv_heads = 16;
  s.head_begin = 8;
  EXPECT_TRUE(KvLayout::Create(s, DenseBytes(s)).ok());
  s.head_begin = 9;
  EXPECT_EQ(KvLayout::Create(s, DenseBytes(s)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvLayout, ElementIndexFollowsTheBlockOrder) {
  KvLayoutSpec s = DenseSpec();
  absl::StatusOr<KvLayout> nhd = KvLayout::Create(s, DenseBytes(s));
  s.order = BlockOrder::kHnd;
  absl::StatusOr<KvLayout> hnd = KvLayout::Create(s, DenseBytes(s));
  ASSERT_TRUE(nhd.ok() && hnd.ok());
  // token 3, head 2, dim 5
  EXPECT_EQ(nhd->ElementIndex(3, 2, 5), (3u * 8 + 2) * 128 + 5);
  EXPECT_EQ(hnd->ElementIndex(3, 2, 5), (2u * 16 + 3) * 128 + 5);
}

}  // namespace
}  // namespace kvt::kv
