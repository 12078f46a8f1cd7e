// The element types the CUDA collectives take (fp32, bf16, fp16), and their conversions to and from fp32 on the
// host: rounding to a type (round to nearest even), and a buffer's bytes from fp32 values and back. Used where
// host code reads or writes device buffers of a DataType (tests, benchmarks, CudaExpertAllToAll::ReadDispatch).
// Stateless and thread-safe.
#ifndef KVT_COLLECTIVE_DATA_TYPE_H_
#define KVT_COLLECTIVE_DATA_TYPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "numerics/dtype.h"

namespace kvt::collective {

using DataType = ::kvt::numerics::DType;

// x rounded to `type` (nearest, ties to even) and back to fp32; x itself for kFloat32.
float RoundTo(DataType type, float x);

// The little-endian element bytes of `x` in `type` (each value rounded as RoundTo).
std::vector<uint8_t> EncodeAs(DataType type, absl::Span<const float> x);

// The fp32 values of the elements in `bytes` (a whole number of elements of `type`; a partial tail is ignored).
std::vector<float> DecodeAs(DataType type, absl::Span<const uint8_t> bytes);

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_DATA_TYPE_H_
