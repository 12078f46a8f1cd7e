// A registered KV cache's layout (proto kvt.v1.KvLayout), validated, and the byte arithmetic on it: where
// layer l's K or V tensor starts, where token t of head h lives inside a block. All offsets are checked against
// 64-bit overflow once, at validation, so accessors can be used on the hot path without re-checking.
// Plain value; thread-compatible.
#ifndef KVT_KV_KV_LAYOUT_H_
#define KVT_KV_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "numerics/dtype.h"

namespace kvt::kv {

using KvDType = ::kvt::numerics::DType;
using BlockOrder = ::kvt::numerics::BlockOrder;

using ::kvt::numerics::DTypeBytes;

struct KvLayoutSpec {
  uint32_t num_layers = 0;
  uint32_t num_blocks = 0;
  uint32_t block_tokens = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  KvDType dtype = KvDType::kBfloat16;
  BlockOrder order = BlockOrder::kNhd;
  uint64_t layer_stride_bytes = 0;
  uint64_t kv_stride_bytes = 0;
  uint32_t head_begin = 0;
  uint32_t total_kv_heads = 0;  // 0 = num_kv_heads
};

// Limits of one layout field (inclusive), applied by KvLayout::Create.
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxBlocks = 1u << 24;
inline constexpr uint32_t kMaxBlockTokens = 1024;
inline constexpr uint32_t kMaxKvHeads = 1024;
inline constexpr uint32_t kMaxHeadDim = 1024;

// A layout with nothing between its tensors: layer l's K, then its V, each num_blocks blocks, packed; the whole
// model's heads (head_begin 0, unsharded).
KvLayoutSpec DenseLayoutSpec(uint32_t num_layers, uint32_t num_blocks, uint32_t block_tokens, uint32_t num_kv_heads,
                             uint32_t head_dim, KvDType dtype = KvDType::kBfloat16, BlockOrder order = BlockOrder::kNhd);

class KvLayout {
 public:
  // Validates `spec` against a region of `region_bytes`. INVALID_ARGUMENT naming the field for a zero or
  // out-of-range dimension, strides smaller than the tensors they separate, a head range outside
  // total_kv_heads, a size that overflows 64 bits, or a last tensor that ends past the region.
  static absl::StatusOr<KvLayout> Create(const KvLayoutSpec& spec, uint64_t region_bytes);

  const KvLayoutSpec& spec() const { return spec_; }
  // Bytes of one block of one layer's K (or V): block_tokens * num_kv_heads * head_dim * dtype bytes.
  uint64_t block_bytes() const { return block_bytes_; }
  // Byte offset, within the region, of block `block` of layer `layer`'s K (kind 0) or V (kind 1).
  // Requires layer < num_layers, kind < 2, block < num_blocks (callers check ids with CheckBlockIds).
  uint64_t BlockOffset(uint32_t layer, uint32_t kind, uint32_t block) const {
    return spec_.layer_stride_bytes * layer + spec_.kv_stride_bytes * kind + block_bytes_ * block;
  }
  // Element offset of (token-in-block, head, dim) inside one block, for the layout's order.
  uint64_t ElementIndex(uint32_t token, uint32_t head, uint32_t dim) const {
    return spec_.order == BlockOrder::kNhd
               ? (static_cast<uint64_t>(token) * spec_.num_kv_heads + head) * spec_.head_dim + dim
               : (static_cast<uint64_t>(head) * spec_.block_tokens + token) * spec_.head_dim + dim;
  }

 private:
  KvLayout(const KvLayoutSpec& spec, uint64_t block_bytes) : spec_(spec), block_bytes_(block_bytes) {}

  KvLayoutSpec spec_;
  uint64_t block_bytes_;
};

}  // namespace kvt::kv

#endif  // KVT_KV_KV_LAYOUT_H_
