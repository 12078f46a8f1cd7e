#include "kv/transfer_plan.h"

#include <cstdint>

#include "codec/page.h"
#include "codec/scheme.h"
#include "gtest/gtest.h"

namespace kvt::kv {
namespace {

codec::Scheme Lynx() { return *codec::ParseScheme("lynx"); }

TEST(AutoPageTokens, SizesPagesByValuesBetween2048And8192Tokens) {
  using codec::AutoPageTokens;
  EXPECT_EQ(AutoPageTokens(1024), 2048);  // Llama-3.1-8B, Qwen3-32B: 8 KV heads x 128
  EXPECT_EQ(AutoPageTokens(4096), 2048);  // wider pages still get the floor
  EXPECT_EQ(AutoPageTokens(512), 4096);   // 4 KV heads x 128
  EXPECT_EQ(AutoPageTokens(513), 4096);
  EXPECT_EQ(AutoPageTokens(1023), 4096);  // one value short of 2^21 at 2048 tokens
  EXPECT_EQ(AutoPageTokens(192), 8192);  // SmolLM2-135M: 3 KV heads x 64
  EXPECT_EQ(AutoPageTokens(1), 8192);    // the ceiling
  EXPECT_EQ(AutoPageTokens(0), 8192);    // nonsense channels do not loop
}

TEST(MakeTransferPlan, ZeroPageTokensTakesTheAutomaticSize) {
  const absl::StatusOr<TransferPlan> plan = MakeTransferPlan(Lynx(), 32, 2, 3000, 0, 1024);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->page_tokens, 2048u);
  // Per layer and kind: one whole page, then the tail's whole chunks (928 tokens) and its last 24 tokens.
  ASSERT_EQ(plan->layers.size(), 2u);
  ASSERT_EQ(plan->layers[0].size(), 2u * 3u);
  EXPECT_EQ(plan->layers[0][0].spec.tokens, 2048u);
  EXPECT_EQ(plan->layers[0][1].spec.tokens, 928u);
  EXPECT_EQ(plan->layers[0][2].spec.tokens, 24u);
  EXPECT_EQ(plan->layers[0][3].spec.kind, 1u);  // then V's pages
}

TEST(MakeTransferPlan, ZeroChunkTokensTakesTheSchemesOwnChunk) {
  // lynx's 16-token chunks: the tail of 952 tokens is 944 in whole chunks and 8; int8's 32: 928 and 24.
  const absl::StatusOr<TransferPlan> lynx = MakeTransferPlan(Lynx(), 0, 1, 3000, 0, 1024);
  ASSERT_TRUE(lynx.ok()) << lynx.status();
  EXPECT_EQ(lynx->chunk_tokens, 16);
  EXPECT_EQ(lynx->layers[0][1].spec.tokens, 944u);
  EXPECT_EQ(lynx->layers[0][2].spec.tokens, 8u);
  const absl::StatusOr<TransferPlan> int8 = MakeTransferPlan(*codec::ParseScheme("int8"), 0, 1, 3000, 0, 1024);
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_EQ(int8->chunk_tokens, 32);
  EXPECT_EQ(int8->layers[0][1].spec.tokens, 928u);
  EXPECT_EQ(MakeTransferPlan(Lynx(), -1, 1, 3000, 0, 1024).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MakeTransferPlan, AnExplicitPageSizeIsKeptRoundedDownToWholeChunks) {
  const absl::StatusOr<TransferPlan> plan = MakeTransferPlan(Lynx(), 32, 1, 1000, 300, 192);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->page_tokens, 288u);
  EXPECT_EQ(plan->layers[0][0].spec.tokens, 288u);
}

TEST(MakeTransferPlan, ASmallHeadModelGetsOnePageForAShortPrompt) {
  const absl::StatusOr<TransferPlan> plan = MakeTransferPlan(Lynx(), 32, 1, 512, 0, 192);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->page_tokens, 8192u);
  ASSERT_EQ(plan->layers[0].size(), 2u);  // K and V, one 512-token page each
  EXPECT_EQ(plan->layers[0][0].spec.tokens, 512u);
}

TEST(MakeTransferPlan, BadDimensionsAreStillRejected) {
  EXPECT_EQ(MakeTransferPlan(Lynx(), 32, 1, 1000, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeTransferPlan(Lynx(), 32, 1, 0, 0, 1024).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::kv
