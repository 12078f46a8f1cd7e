// Codec options: everything that changes how a page is encoded or decoded, with its default.
// The defaults of the lynx family (centering, alpha, anchor rule) are chosen by the sweep in docs/CODEC.md.
#ifndef KVT_CODEC_OPTIONS_H_
#define KVT_CODEC_OPTIONS_H_

#include "absl/status/status.h"

namespace kvt::codec {

// Which implementation runs the codec. All produce identical codes (tests compare them).
enum class CodecImpl {
  kAuto,       // the fastest the CPU supports, chosen at run time (AVX-512, else AVX2, else reference)
  kReference,  // the scalar reference: the spec
  kAvx2,
  kAvx512,
};

// What a lynx chunk is centred on before the log transform (docs/CODEC.md).
enum class Centering {
  kMidrange,  // (min + max) / 2: sigma = half the chunk's range, no level wasted
  kMean,      // the chunk mean, as the source paper does: sigma = max |x - mean|, up to twice the range needed
};

// Where a partial (anchor-only, ...) decode puts a value whose lower code bits are unknown.
enum class AnchorRule {
  kCodeCentre,       // centre of the anchor's interval in the code (log) domain
  kValueCentre,      // centre of the anchor's interval in the value domain
  kConditionalMean,  // the mean full-precision value in the interval over the page's sample (stored in the anchor
                     // stream; docs/FORMAT.md "Anchor tables")
};

enum class NonFinitePolicy {
  kReject,       // NaN/Inf in the input -> INVALID_ARGUMENT naming the first bad (token, channel)
};

inline constexpr float kMinAlpha = 1e-3f;
inline constexpr float kMaxAlpha = 1e4f;
// CodecOptions::top_width: 0, or in [kMinTopWidth, kMaxTopWidth]. The most is 15.5 / 127, the plain spacing of
// the top eighth's codes with alpha -> 0: a wider top is not a knee (and would defeat the encoders' fast guess).
inline constexpr float kMinTopWidth = 0.02f;
inline constexpr float kMaxTopWidth = 0.12f;
// Whether `w` is a valid top_width: +0 (not -0: headers keep the bits they are given) or in the range.
bool ValidTopWidth(float w);

struct CodecOptions {
  // Tokens per chunk (metadata granularity of int8/int4 and the lynx family). 1..256, or 0: the scheme's own
  // (scheme.h ResolveChunkTokens: 16 for the lynx family, 32 for int8/int4). Pages longer than one chunk must be
  // a whole number of chunks. Encode-side only: the decoder reads it from the container.
  int chunk_tokens = 0;
  // The lynx log curve's steepness, in [kMinAlpha, kMaxAlpha]; chosen by the sweep in docs/CODEC.md. It travels
  // in the container, so the decoder uses the encoder's value (the decode-side field is ignored).
  float alpha = 0.1f;  // docs/CODEC.md "Version 2.1": near-linear; 0.5 until the exact-extremes tables
  // The lynx curve's knee (docs/CODEC.md "Version 3"), for 8-bit codes: the top eighth of the magnitude codes
  // (the 4-bit anchor's outermost cell) spans [1 - top_width, 1] of |x_final|, linearly, and the log curve,
  // rescaled, the rest. 0: the plain log curve. 0 or in [kMinTopWidth, kMaxTopWidth]; travels in the container
  // like alpha. lynx4 and other code widths ignore it.
  float top_width = 0.11f;
  // Encode-side only (the decoder needs no knowledge of it).
  Centering centering = Centering::kMidrange;
  // Decode-side only (every multi-stream lynx container carries the conditional-mean tables): how a decode with
  // fewer than all stages reconstructs values.
  AnchorRule anchor_rule = AnchorRule::kConditionalMean;  // the sweep in docs/CODEC.md
  // On top of anchor_rule: a partial decode puts the only value of a chunk-channel in the top cell of its sign
  // (the chunk's extreme there, under midrange centering) at the full top code, i.e. the stored chunk end,
  // instead of the cell's reconstruction point (docs/CODEC.md "Exact extremes"). Read by the decoder and the
  // encoder: the encoder's conditional-mean tables then leave those values out of the top cells' means (the
  // container does not record which; a decode with the other setting still works, slightly less well).
  bool exact_extremes = true;
  NonFinitePolicy non_finite = NonFinitePolicy::kReject;
  // kAvx2 / kAvx512 on a CPU without them: INVALID_ARGUMENT (see ImplAvailable).
  CodecImpl impl = CodecImpl::kAuto;

  // OK, or INVALID_ARGUMENT saying which field is out of range.
  absl::Status Validate() const;
};

// Whether `impl` can run on this CPU (kAuto and kReference always can).
bool ImplAvailable(CodecImpl impl);
// What kAuto resolves to on this CPU.
CodecImpl ResolveImpl(CodecImpl impl);
const char* ImplName(CodecImpl impl);

}  // namespace kvt::codec

#endif  // KVT_CODEC_OPTIONS_H_
