#include "kv/kv_layout.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace kvt::kv {
namespace {

// a * b, or nullopt-like failure through `ok`.
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool AddOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

absl::Status CheckRange(const char* field, uint64_t value, uint64_t max) {
  if (value == 0 || value > max) {
    return absl::InvalidArgumentError(absl::StrCat("layout.", field, " is ", value, "; it must be in 1..", max));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvLayout> KvLayout::Create(const KvLayoutSpec& spec, uint64_t region_bytes) {
  for (auto s : {CheckRange("num_layers", spec.num_layers, kMaxLayers),
                 CheckRange("num_blocks", spec.num_blocks, kMaxBlocks),
                 CheckRange("block_tokens", spec.block_tokens, kMaxBlockTokens),
                 CheckRange("num_kv_heads", spec.num_kv_heads, kMaxKvHeads),
                 CheckRange("head_dim", spec.head_dim, kMaxHeadDim)}) {
    if (!s.ok()) return s;
  }
  if (DTypeBytes(spec.dtype) == 0) return absl::InvalidArgumentError("layout.dtype is not bf16, fp16 or fp32");
  if (spec.order != BlockOrder::kNhd && spec.order != BlockOrder::kHnd) {
    return absl::InvalidArgumentError("layout.order is not NHD or HND");
  }
  const uint64_t total_heads = spec.total_kv_heads == 0 ? spec.num_kv_heads : spec.total_kv_heads;
  if (total_heads > kMaxKvHeads || static_cast<uint64_t>(spec.head_begin) + spec.num_kv_heads > total_heads) {
    return absl::InvalidArgumentError(absl::StrCat("layout holds heads [", spec.head_begin, ", ",
                                                   static_cast<uint64_t>(spec.head_begin) + spec.num_kv_heads,
                                                   ") of ", total_heads, ": the range must lie inside"));
  }
  // Every product below fits: each factor is < 2^24 and there are at most three of them plus the dtype size,
  // except num_blocks * block_bytes, checked explicitly.
  const uint64_t block_bytes = static_cast<uint64_t>(spec.block_tokens) * spec.num_kv_heads * spec.head_dim *
                               DTypeBytes(spec.dtype);
  uint64_t tensor_bytes = 0;
  if (!MulOk(block_bytes, spec.num_blocks, &tensor_bytes)) {
    return absl::InvalidArgumentError("layout: num_blocks * block bytes overflows 64 bits");
  }
  if (spec.kv_stride_bytes < tensor_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("layout.kv_stride_bytes ", spec.kv_stride_bytes,
                                                   " is smaller than one K tensor (", tensor_bytes, " bytes)"));
  }
  uint64_t two_tensors = 0;
  if (!AddOk(spec.kv_stride_bytes, tensor_bytes, &two_tensors) || spec.layer_stride_bytes < two_tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout.layer_stride_bytes ", spec.layer_stride_bytes,
                     " is smaller than kv_stride_bytes + one V tensor (", two_tensors, " bytes)"));
  }
  // End of the last layer's V tensor.
  uint64_t end = 0;
  if (!MulOk(spec.layer_stride_bytes, spec.num_layers - 1, &end) || !AddOk(end, two_tensors, &end)) {
    return absl::InvalidArgumentError("layout: the region's extent overflows 64 bits");
  }
  if (end > region_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("layout needs ", end, " bytes but the region has ",
                                                   region_bytes, ": check strides and num_blocks"));
  }
  return KvLayout(spec, block_bytes);
}

KvLayoutSpec DenseLayoutSpec(uint32_t num_layers, uint32_t num_blocks, uint32_t block_tokens, uint32_t num_kv_heads,
                             uint32_t head_dim, KvDType dtype, BlockOrder order) {
  KvLayoutSpec s;
  s.num_layers = num_layers;
  s.num_blocks = num_blocks;
  s.block_tokens = block_tokens;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.dtype = dtype;
  s.order = order;
  s.kv_stride_bytes = uint64_t{num_blocks} * block_tokens * num_kv_heads * head_dim * DTypeBytes(dtype);
  s.layer_stride_bytes = 2 * s.kv_stride_bytes;
  return s;
}

}  // namespace kvt::kv
