// Reading one tensor of a .safetensors file (little-endian F32, F16 or BF16, any rank) into float32, for
// `kvtctl codec eval --in x.safetensors --tensor NAME`. The parser is for untrusted files: a header length past
// the file, malformed JSON, a missing or ill-typed field, an unsupported dtype or offsets that disagree with the
// shape give INVALID_ARGUMENT naming the problem, never a crash. Thread-compatible plain functions.
//
//   KVT_ASSIGN_OR_RETURN(NpyArray kv, ReadSafetensorsFile("dump.safetensors", "kv"));   // e.g. [32, 2, T, 8, 128]
#ifndef KVT_CODEC_EVAL_SAFETENSORS_H_
#define KVT_CODEC_EVAL_SAFETENSORS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codec/eval/npy.h"

namespace kvt::codec::eval {

// Largest header accepted (the format's own limit is 100 MB).
inline constexpr size_t kMaxSafetensorsHeaderBytes = 100u << 20;

// The tensor `name` of a whole file's bytes. An empty `name` selects the only tensor of a one-tensor file;
// otherwise INVALID_ARGUMENT listing the names. NOT_FOUND (listing the names) for an absent tensor.
absl::StatusOr<NpyArray> ParseSafetensors(absl::string_view bytes, const std::string& name);

// Reads `path` and parses it as above; NOT_FOUND if it cannot be opened. Messages carry the path.
absl::StatusOr<NpyArray> ReadSafetensorsFile(const std::string& path, const std::string& name);

// The tensor names in a file's header, sorted; the same errors as ParseSafetensors for a bad header.
absl::StatusOr<std::vector<std::string>> SafetensorsTensorNames(absl::string_view bytes);

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_SAFETENSORS_H_
