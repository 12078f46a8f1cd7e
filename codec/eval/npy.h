// Reading and writing NumPy .npy files (format versions 1.0-3.0): little-endian float32 or float16, C order,
// any rank. Everything is read into float32. Used by `kvtctl codec` to load KV dumps and write decoded KV.
// The parser is for untrusted files: a bad magic, an unsupported dtype, Fortran order, a malformed header or
// truncated data give INVALID_ARGUMENT naming the problem, never a crash. Thread-compatible plain functions.
//
//   KVT_ASSIGN_OR_RETURN(NpyArray kv, ReadNpyFile("kv.npy"));     // kv.shape == {32, 2, 4096, 8, 128}
//   KVT_RETURN_IF_ERROR(WriteNpyFile("out.npy", kv));              // float32, same shape
#ifndef KVT_CODEC_EVAL_NPY_H_
#define KVT_CODEC_EVAL_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "numerics/dtype.h"

namespace kvt::codec::eval {

// An array's stored element type: kFloat32 '<f4', kFloat16 '<f2', kBfloat16 (read from .safetensors only: .npy
// has no bfloat16; never written). numerics::DTypeName names it.
using NpyDtype = ::kvt::numerics::DType;

// A dense C-order array, values widened to float32. data.size() == product of shape.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
  NpyDtype source_dtype = NpyDtype::kFloat32;  // the dtype it was stored with (for reports only)

  int64_t num_values() const;
};

// Largest array accepted: 2^31 values (8 GiB of float32), enough for any one request's KV.
inline constexpr int64_t kMaxNpyValues = int64_t{1} << 31;

// Parses the bytes of a whole .npy file.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes);

// Reads and parses `path`. NOT_FOUND if it cannot be opened; otherwise as ParseNpy, with the path in messages.
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// Serializes `array` as a version 1.0 .npy file with dtype `dtype` (float16 rounds to nearest even;
// values beyond the float16 range become +-inf). INVALID_ARGUMENT if data.size() disagrees with the shape or
// for kBfloat16.
absl::StatusOr<std::string> SerializeNpy(const NpyArray& array, NpyDtype dtype = NpyDtype::kFloat32);

// Writes `array` to `path` (replacing it). INTERNAL with the path if the file cannot be written.
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array, NpyDtype dtype = NpyDtype::kFloat32);

// IEEE binary16 <-> binary32 conversions (round to nearest even; NaN stays NaN).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_NPY_H_
