// The plans of GPU regions: every page starts on an engine block (the kernels read and write whole blocks), which
// GpuPlanChunkTokens arranges for blocks that do not divide the scheme's own chunk, and CheckGpuPlan checks.
#include <cstdint>

#include "codec/scheme.h"
#include "gtest/gtest.h"
#include "kv/kv_layout.h"
#include "kv/transfer_plan.h"
#include "server/gpu_region_codec.h"

namespace kvt::server {
namespace {

kv::KvLayout Layout(uint32_t block_tokens) {
  kv::KvLayoutSpec spec;
  spec.num_layers = 2;
  spec.num_blocks = 64;
  spec.block_tokens = block_tokens;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  const uint64_t tensor = uint64_t{64} * block_tokens * 8 * 128 * 2;  // a layer's K (or V): 64 blocks of bf16
  spec.kv_stride_bytes = tensor;
  spec.layer_stride_bytes = 2 * tensor;
  const uint64_t bytes = 2 * 2 * tensor;
  absl::StatusOr<kv::KvLayout> layout = kv::KvLayout::Create(spec, bytes);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *std::move(layout);
}

TEST(GpuPlanTest, ChunksBecomeBlockMultiplesSoThatEveryTailPageStartsOnABlock) {
  const codec::Scheme lynx = *codec::ParseScheme("lynx");
  EXPECT_EQ(GpuPlanChunkTokens(lynx, 0, 16), 16);   // the block divides lynx's 16-token chunk
  EXPECT_EQ(GpuPlanChunkTokens(lynx, 0, 8), 16);
  EXPECT_EQ(GpuPlanChunkTokens(lynx, 0, 32), 32);   // 32-token blocks: 32-token chunks
  EXPECT_EQ(GpuPlanChunkTokens(lynx, 0, 48), 48);
  EXPECT_EQ(GpuPlanChunkTokens(lynx, 0, 512), 16);  // past the codec's 256: left to CheckGpuPlan to refuse
  EXPECT_EQ(GpuPlanChunkTokens(*codec::ParseScheme("int8"), 0, 32), 32);
  EXPECT_EQ(GpuPlanChunkTokens(lynx, 64, 32), 64);  // the daemon's explicit chunk stays
  // Every request length from 1 to 300 tokens, 32-token blocks: planned with lynx's own chunk, a tail page
  // would start mid-block for about half of them; with GpuPlanChunkTokens none does.
  const kv::KvLayout layout = Layout(32);
  int mid_block = 0;
  for (uint64_t tokens = 1; tokens <= 300; ++tokens) {
    absl::StatusOr<kv::TransferPlan> own = kv::MakeTransferPlan(lynx, 0, 2, tokens, 128, 1024);
    ASSERT_TRUE(own.ok()) << own.status();
    mid_block += !CheckGpuPlan(layout, *own).ok();
    absl::StatusOr<kv::TransferPlan> gpu =
        kv::MakeTransferPlan(lynx, GpuPlanChunkTokens(lynx, 0, 32), 2, tokens, 128, 1024);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_TRUE(CheckGpuPlan(layout, *gpu).ok()) << tokens << " tokens";
  }
  EXPECT_GT(mid_block, 100);  // the test can fail: the scheme's own chunk does not fit these blocks
}

TEST(GpuPlanTest, APageStartingMidBlockIsRefusedSayingWhy) {
  const codec::Scheme lynx = *codec::ParseScheme("lynx");
  absl::StatusOr<kv::TransferPlan> plan = kv::MakeTransferPlan(lynx, 16, 1, 50, 128, 1024);  // pages 48 and 2
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::Status st = CheckGpuPlan(Layout(32), *plan);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("start on engine blocks"), std::string::npos) << st;
  EXPECT_TRUE(CheckGpuPlan(Layout(16), *plan).ok());
}

}  // namespace
}  // namespace kvt::server
