// The codec schemes of docs/FORMAT.md and their names ("bf16", "int8", "int4", "fp8", "lynx", "lynx-a2r6",
// "lynx-a2r2r4", "lynx8", "lynx4", any of the lynx family with "+spike" for spike reserving, "+e<bits>" for its
// chunk-end pair width and "+f<k>" for its frame spikes when they differ from the defaults).
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

// The lynx family's metadata format (docs/FORMAT.md, version 4; docs/CODEC.md "Version 4" has the measurements):
// each chunk's two ends are one index of kDefaultEndPairBits bits on a grid over its page-channel's frame, and
// each page-channel keeps kDefaultFrameSpikes values exactly, outside that frame. Version 3's layout is
// end_pair_bits 23, frame_spikes 0 (with 32-token chunks).
inline constexpr int kMinEndPairBits = 8;
inline constexpr int kMaxEndPairBits = 23;
inline constexpr int kDefaultEndPairBits = 14;
inline constexpr int kMaxFrameSpikes = 7;
inline constexpr int kDefaultFrameSpikes = 3;
// Tokens per chunk when the caller does not choose (CodecOptions::chunk_tokens = 0): the lynx family's
// metadata is per 16 tokens, int8's and int4's per 32 (their f16 pair costs twice lynx's 14-bit end pair).
inline constexpr int kLynxChunkTokens = 16;
inline constexpr int kUniformChunkTokens = 32;

struct Scheme {
  SchemeKind kind = SchemeKind::kLynx;
  // Code bits carried by each stream, anchor first. Single-stream schemes have one entry (bf16: 16, int8: 8,
  // int4: 4, fp8: 8, lynx8: 8, lynx4: 4). lynx: {4, 4}; lynx-a2r2r4: {2, 2, 4}. The anchor width counts the
  // sign bit, so it is at least 1 (sign only is allowed but useless); the sum is at most 8 for the lynx family.
  std::vector<int> stage_bits;
  // Spike reserving (lynx family only): each chunk's largest-|x| value travels exactly in the anchor stream.
  bool spike_reserve = false;
  // Lynx family only (0 for the others): the width of a chunk's stored end pair, kMinEndPairBits..
  // kMaxEndPairBits; its grid has EndGridPoints(end_pair_bits) points.
  int end_pair_bits = 0;
  // Lynx family only: the values of each page-channel kept exactly and out of its frame (0..kMaxFrameSpikes; 0
  // with spike reserving, which keeps one per chunk instead).
  int frame_spikes = 0;

  int num_streams() const { return static_cast<int>(stage_bits.size()); }
  int total_code_bits() const;
  // The canonical name; ParseScheme(Name()) gives back an equal Scheme.
  std::string Name() const;
  bool operator==(const Scheme& o) const {
    return kind == o.kind && stage_bits == o.stage_bits && spike_reserve == o.spike_reserve &&
           end_pair_bits == o.end_pair_bits && frame_spikes == o.frame_spikes;
  }
};

// The chunk tokens a page of `scheme` uses when asked for `chunk_tokens` (0: the scheme's own,
// kLynxChunkTokens or kUniformChunkTokens; anything else as given).
int ResolveChunkTokens(const Scheme& scheme, int chunk_tokens);

// Parses a scheme name. INVALID_ARGUMENT with the list of valid forms for anything else.
absl::StatusOr<Scheme> ParseScheme(absl::string_view name);

// The named schemes every report covers: bf16 int8 int4 fp8 lynx lynx-a2r6 lynx-a3r5 lynx-a2r2r4 lynx8 lynx4.
std::vector<std::string> StandardSchemeNames();

}  // namespace kvt::codec

#endif  // KVT_CODEC_SCHEME_H_
