// The element types kvt moves and computes on, and the two orders of a paged KV block: an engine's KV blocks
// (kv/kv_layout.h), the GPU codec's views of them, the collectives' buffers and the eval tool's arrays all name
// their element type and block order with these enums.
#ifndef KVT_NUMERICS_DTYPE_H_
#define KVT_NUMERICS_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "numerics/host_device.h"

namespace kvt::numerics {

enum class DType : uint8_t { kFloat32, kBfloat16, kFloat16 };

// Bytes of one element: 4 or 2; 0 for a value outside the enum (a caller that validates a cast in).
KVT_HOST_DEVICE size_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBfloat16:
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

// How a block of a paged KV cache holds its values: kNhd [blocks, block_tokens, heads, head_dim] (vLLM's default),
// kHnd [blocks, heads, block_tokens, head_dim].
enum class BlockOrder : uint8_t { kNhd, kHnd };

// "float32", "bfloat16", "float16"; "invalid" outside the enum.
inline const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kBfloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  return "invalid";
}

}  // namespace kvt::numerics

#endif  // KVT_NUMERICS_DTYPE_H_
