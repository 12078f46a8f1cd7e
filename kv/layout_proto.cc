#include "kv/layout_proto.h"

#include "absl/strings/str_cat.h"

namespace kvt::kv {

absl::StatusOr<KvLayoutSpec> LayoutFromProto(const v1::KvLayout& p) {
  KvLayoutSpec s;
  s.num_layers = p.num_layers();
  s.num_blocks = p.num_blocks();
  s.block_tokens = p.block_tokens();
  s.num_kv_heads = p.num_kv_heads();
  s.head_dim = p.head_dim();
  switch (p.dtype()) {
    case v1::DTYPE_BF16:
      s.dtype = KvDType::kBfloat16;
      break;
    case v1::DTYPE_FP16:
      s.dtype = KvDType::kFloat16;
      break;
    case v1::DTYPE_FP32:
      s.dtype = KvDType::kFloat32;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("layout.dtype must be DTYPE_BF16, DTYPE_FP16 or DTYPE_FP32, got ", p.dtype()));
  }
  switch (p.order()) {
    case v1::BLOCK_ORDER_NHD:
      s.order = BlockOrder::kNhd;
      break;
    case v1::BLOCK_ORDER_HND:
      s.order = BlockOrder::kHnd;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("layout.order must be BLOCK_ORDER_NHD or BLOCK_ORDER_HND, got ", p.order()));
  }
  s.layer_stride_bytes = p.layer_stride_bytes();
  s.kv_stride_bytes = p.kv_stride_bytes();
  s.head_begin = p.head_begin();
  s.total_kv_heads = p.total_kv_heads();
  return s;
}

v1::KvLayout LayoutToProto(const KvLayoutSpec& s) {
  v1::KvLayout p;
  p.set_num_layers(s.num_layers);
  p.set_num_blocks(s.num_blocks);
  p.set_block_tokens(s.block_tokens);
  p.set_num_kv_heads(s.num_kv_heads);
  p.set_head_dim(s.head_dim);
  p.set_dtype(s.dtype == KvDType::kBfloat16   ? v1::DTYPE_BF16
              : s.dtype == KvDType::kFloat16 ? v1::DTYPE_FP16
                                          : v1::DTYPE_FP32);
  p.set_order(s.order == BlockOrder::kNhd ? v1::BLOCK_ORDER_NHD : v1::BLOCK_ORDER_HND);
  p.set_layer_stride_bytes(s.layer_stride_bytes);
  p.set_kv_stride_bytes(s.kv_stride_bytes);
  p.set_head_begin(s.head_begin);
  p.set_total_kv_heads(s.total_kv_heads);
  return p;
}

}  // namespace kvt::kv
