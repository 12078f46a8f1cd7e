// The codec schemes of docs/FORMAT.md and their names ("bf16", "int8", "int4", "fp8", "lynx", "lynx-a2r6",
// "lynx-a2r2r4", "lynx8", "lynx4", any of the lynx family with "+spike" for spike reserving).
// Plain values; thread-compatible.
//
//   absl::StatusOr<Scheme> s = ParseScheme("lynx-a3r5");
//   s->num_streams() == 2; s->stage_bits == {3, 5}; s->Name() == "lynx-a3r5"
#ifndef KVT_CODEC_SCHEME_H_
#define KVT_CODEC_SCHEME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvt::codec {

// Stored in the container header (docs/FORMAT.md): values never change meaning.
enum class SchemeKind : uint8_t {
  kBf16 = 1,  // raw bf16 passthrough (round-to-nearest-even from the input)
  kInt8 = 2,  // uniform asymmetric RTN per channel per chunk, 8 bits
  kInt4 = 3,  // the same with 4 bits
  kFp8 = 4,   // e4m3 with one scale per group of 128 values along the channel axis
  kLynx = 5,  // hierarchical log quantization, code split into stage_bits streams
};

// The most streams a container may hold (anchor + 7 refinement stages).
inline constexpr int kMaxStreams = 8;

struct Scheme {
  SchemeKind kind = SchemeKind::kLynx;
  // Code bits carried by each stream, anchor first. Single-stream schemes have one entry (bf16: 16, int8: 8,
  // int4: 4, fp8: 8, lynx8: 8, lynx4: 4). lynx: {4, 4}; lynx-a2r2r4: {2, 2, 4}. The anchor width counts the
  // sign bit, so it is at least 1 (sign only is allowed but useless); the sum is at most 8 for the lynx family.
  std::vector<int> stage_bits;
  // Spike reserving (lynx family only): each chunk's largest-|x| value travels exactly in the anchor stream.
  bool spike_reserve = false;

  int num_streams() const { return static_cast<int>(stage_bits.size()); }
  int total_code_bits() const;
  // The canonical name; ParseScheme(Name()) gives back an equal Scheme.
  std::string Name() const;
  bool operator==(const Scheme& o) const {
    return kind == o.kind && stage_bits == o.stage_bits && spike_reserve == o.spike_reserve;
  }
};

// Parses a scheme name. INVALID_ARGUMENT with the list of valid forms for anything else.
absl::StatusOr<Scheme> ParseScheme(absl::string_view name);

// The named schemes every report covers: bf16 int8 int4 fp8 lynx lynx-a2r6 lynx-a3r5 lynx-a2r2r4 lynx8 lynx4.
std::vector<std::string> StandardSchemeNames();

}  // namespace kvt::codec

#endif  // KVT_CODEC_SCHEME_H_
