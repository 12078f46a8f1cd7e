#include "kv/page_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::kv {
namespace {

KvLayout MakeLayout(uint32_t block_tokens, uint32_t num_blocks = 10) {
  KvLayoutSpec s;
  s.num_layers = 2;
  s.num_blocks = num_blocks;
  s.block_tokens = block_tokens;
  s.num_kv_heads = 2;
  s.head_dim = 4;
  s.dtype = KvDType::kBfloat16;
  s.order = BlockOrder::kNhd;
  s.kv_stride_bytes = uint64_t{num_blocks} * block_tokens * 2 * 4 * 2;
  s.layer_stride_bytes = 2 * s.kv_stride_bytes;
  absl::StatusOr<KvLayout> layout = KvLayout::Create(s, s.layer_stride_bytes * s.num_layers);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

bool Mentions(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST(CheckRequestBlocks, AcceptsExactlyEnoughDistinctBlocksInAnyOrder) {
  const KvLayout layout = MakeLayout(16);
  const std::vector<uint32_t> ids = {7, 0, 9, 3};
  EXPECT_TRUE(CheckRequestBlocks(layout, ids, 64).ok());
  EXPECT_TRUE(CheckRequestBlocks(layout, ids, 49).ok());  // last block holds one token
}

TEST(CheckRequestBlocks, ZeroTokensAreRejected) {
  const absl::Status s = CheckRequestBlocks(MakeLayout(16), std::vector<uint32_t>{1}, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(s, "0 tokens")) << s;
}

TEST(CheckRequestBlocks, TokensBeyondWhatAPageSpecCanNumberAreRejected) {
  // 2^23 blocks of 1024 tokens could hold 2^33 tokens.
  const KvLayout layout = MakeLayout(1024, 1u << 23);
  const absl::Status s = CheckRequestBlocks(layout, std::vector<uint32_t>{0}, kMaxRequestTokens + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(s, "1..4294967295")) << s;
}

TEST(CheckRequestBlocks, NoBlocksAreRejected) {
  const absl::Status s = CheckRequestBlocks(MakeLayout(16), {}, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(s, "no blocks")) << s;
}

TEST(CheckRequestBlocks, TooFewBlocksAreRejectedSayingHowManyAreNeeded) {
  const absl::Status s = CheckRequestBlocks(MakeLayout(16), std::vector<uint32_t>{1, 2}, 33);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(s, "exactly 3")) << s;
  EXPECT_TRUE(Mentions(s, "too few")) << s;
}

TEST(CheckRequestBlocks, ASpareTrailingBlockIsRejected) {
  const absl::Status s = CheckRequestBlocks(MakeLayout(16), std::vector<uint32_t>{1, 2, 3}, 32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(s, "exactly 2")) << s;
  EXPECT_TRUE(Mentions(s, "too many")) << s;
}

TEST(CheckRequestBlocks, AnIdPastTheRegionsBlocksIsRejectedByPosition) {
  const absl::Status s = CheckRequestBlocks(MakeLayout(16, 10), std::vector<uint32_t>{1, 10}, 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(s, "block_ids[1] is 10")) << s;
  EXPECT_TRUE(Mentions(s, "0..9")) << s;
}

TEST(CheckRequestBlocks, ARepeatedIdIsRejectedWithBothPositions) {
  const absl::Status s = CheckRequestBlocks(MakeLayout(16), std::vector<uint32_t>{4, 8, 2, 8}, 64);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(s, "block 8 appears twice (block_ids[1] and [3])")) << s;
}

}  // namespace
}  // namespace kvt::kv
