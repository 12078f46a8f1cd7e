// The lynx family's arithmetic, shared by every implementation (scalar reference, AVX2, AVX-512, and the host
// side of the CUDA kernels): the code tables for a given (alpha, code bits), the per-chunk metadata
// quantizers, the conditional-mean anchor tables, and the exact float-op sequences that turn stored metadata
// into the mu/sigma the codes use.
// docs/FORMAT.md and docs/CODEC.md state the same procedure in words. Tables are immutable; thread-safe.
#ifndef KVT_CODEC_INTERNAL_LYNX_MATH_H_
#define KVT_CODEC_INTERNAL_LYNX_MATH_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "codec/internal/lynx_grid.h"
#include "codec/options.h"

namespace kvt::codec::internal {

// Everything that depends on (alpha, top width w, b) only, b = total code bits (2..8), M = 2^(b-1) - 1.
//
// The curve (docs/FORMAT.md "The lynx curve"): V(c) = expm1((c / M) * log1p(alpha)) / alpha, the value of the
// (fractional) code c, with a knee when w > 0 and b = 8: the top eighth of the codes, c >= c0 = 111.5 (the 4-bit
// anchor's outermost cell), spans [1 - w, 1] linearly, V(c) = 1 - w + w (c - c0) / (M - c0), and below c0 the
// log curve is rescaled to end there, V(c) = (1 - w) * V0(c) / V0(c0) with V0 the plain curve. All in double.
struct LynxTables {
  float alpha = 0;
  float top_width = 0;  // w: 0 = no knee (also for b < 8)
  int bits = 0;  // b
  int max_code = 0;  // M
  // thresholds[k] for k in 1..M: t_k = float(V(k - 0.5)).
  // The magnitude code of a = |x_final| is I = #{k in 1..M : a >= t_k}. thresholds[0] = 0 (unused).
  std::vector<float> thresholds;
  // full_values[I] = float(V(I)): the full-precision reconstruction.
  std::vector<float> full_values;

  // Fast exact path (implementation detail of the vectorized encoders, proven equal to the count above):
  // j = (int)(a * bucket_count) (exact: bucket_count is a power of two), I = bucket_base[j] +
  // sum_{i=1..corrections} (a >= padded_thresholds[bucket_base[j] + i]).
  int bucket_count = 0;
  int corrections = 0;
  std::vector<int32_t> bucket_base;       // bucket_count + 1 entries: #{k : t_k <= j / bucket_count}
  std::vector<float> padded_thresholds;   // M + corrections + 1 entries; +inf past M

  // Gather-free path of the AVX-512 encoder: f = floor of a polynomial log2 guess of y (clamped to [0, M]),
  // then I = f + (a >= guess_high[f]) with guess_high[f] = t_{f+1} (t_{M+1} = +inf). log_guess_ok says I is f
  // or f + 1 wherever the guess was verified over [0, 1] (else the encoder uses the bucket path).
  // guess_low[g] = t_g (t_0 = 0) is kept for two-sided corrections.
  // The guesses estimate the code as y = max(bulk(a), knee_slope * a + knee_offset) (f32 fused multiply-add),
  // bulk(a) = log2(1 + guess_alpha * a) * guess_scale, the log part of V inverted: guess_alpha = alpha, or alpha *
  // V0(c0) / (1 - w) with the knee, whose line is the linear top (without one: slope 0, offset -inf).
  float guess_scale = 0;  // M / log2(1 + alpha)
  float guess_alpha = 0;
  float knee_slope = 0, knee_offset = 0;
  bool log_guess_ok = false;
  std::vector<float> guess_low, guess_high;  // M + 1 entries each

  // Polynomial path of the AVX-512 VBMI encoder, for gentle curves such as the default alpha: the guess is
  // y = max(a (c0 + a (c1 + a (c2 + a c3))), knee line) (PolyGuess: f32 fused multiply-adds in that order, one
  // f32 multiply, the line's fused multiply-add, the maximum), f = min((int)y, M), and I = f + (a >=
  // guess_high[f]) as for the log guess. The cubic fits bulk(a). poly_guess_ok says the guess is within 0.25 of
  // the exact curve wherever checked (the log guess's dense grid and every threshold), so that I is f or f + 1,
  // and, with a knee, below M + 1, so that the vector code needs no clamp there (and without one, no line).
  std::array<float, 4> guess_poly{};
  bool poly_guess_ok = false;

  // Signed reconstruction tables indexed by the known code prefix p (the top `known` bits of the b-bit code
  // sign:I), one per (known bits 1..b, fixed anchor rule): decode_table(known, rule)[p] = +-v. With known == b
  // both rules give full_values. kConditionalMean's tables travel in the container (ConditionalMeanTable); here
  // it names its fallback, the code-centre table.
  const std::vector<float>& decode_table(int known, AnchorRule rule) const {
    return decode_tables[known][rule == AnchorRule::kValueCentre ? 1 : 0];
  }
  std::array<std::array<std::vector<float>, 2>, 9> decode_tables;
};

// Tables for (alpha, top_width, bits); cached, so repeated calls are cheap. Requires alpha in [kMinAlpha,
// kMaxAlpha], top_width 0 or in [kMinTopWidth, kMaxTopWidth] (CodecOptions::Validate), bits 2..8.
std::shared_ptr<const LynxTables> GetLynxTables(float alpha, float top_width, int bits);

// The log2 guess of the AVX-512 encoder in scalar form (an estimate of y = max(bulk(a), knee line)), used to
// verify log_guess_ok: bulk(a) ~ (e + 2/ln2 (u + u^3/3 + u^5/5)) * guess_scale, u = (m - 1)/(m + 1),
// 1 + guess_alpha a = m 2^e.
double LogGuess(const LynxTables& t, float a);
// The polynomial guess (LynxTables::guess_poly) with exactly the vector code's f32 operations.
float PolyGuess(const LynxTables& t, float a);

// The reference definition of the magnitude code.
inline int MagnitudeCode(const LynxTables& t, float a) {
  int i = 0;
  while (i < t.max_code && a >= t.thresholds[i + 1]) ++i;
  return i;
}

// ---- Metadata (per page-channel: lo/hi; per chunk: the ends of its interval) -------------------------------

// The same offset without a division, for vector paths: y = n * r (r = float(1 / C), C = G / 2), then one
// correction y + (n - y * C) * r, both fused multiply-adds (the residual n - y * C is exact). Equals EndOffset(q,
// G) for every q of every grid (checked exhaustively by lynx_math_test); a vector path that does these three IEEE
// operations lane by lane therefore gets the correctly rounded quotient.
inline float EndOffsetByReciprocal(int q, int grid_max) {
  const float c = static_cast<float>(grid_max >> 1);
  const float inv = 1.0f / c;
  const float n = static_cast<float>(q) - c;
  const float y = n * inv;
  const float residual = std::fmaf(-y, c, n);
  return std::fmaf(residual, inv, y);
}

//   inv_sigma = sigma > 0 ? min(1.0f / sigma, FLT_MAX) : 0   (correctly rounded float division; the encoder
// multiplies by it, so a vector path needs no division per value)
inline float InverseSigma(float sigma) {
  if (!(sigma > 0.0f)) return 0.0f;
  float inv = 1.0f / sigma;
  return inv < std::numeric_limits<float>::max() ? inv : std::numeric_limits<float>::max();
}

// QuantizeChunkEnds (lynx_grid.h) with the encoder's centering option.
inline void QuantizeChunkEnds(const ChannelFrame& f, Centering centering, float cmin, float cmax, float m,
                              int& q_low, int& q_high) {
  QuantizeChunkEnds(f, centering == Centering::kMean, cmin, cmax, m, q_low, q_high);
}

// The inverse of EndPairIndex on the grid 0..grid_max; false for an index above MaxEndPairIndex(grid_max) (no
// encoder writes one). The f32 square root is only a first guess, corrected exactly in integers.
inline bool EndPairFromIndex(uint32_t index, int grid_max, int& q_low, int& q_high) {
  if (index > MaxEndPairIndex(grid_max)) return false;
  int32_t h = static_cast<int32_t>((std::sqrt(8.0f * static_cast<float>(index) + 1.0f) - 1.0f) * 0.5f);
  if (h > grid_max) h = grid_max;
  while (h > 0 && h * (h + 1) / 2 > static_cast<int32_t>(index)) --h;
  while ((h + 1) * (h + 2) / 2 <= static_cast<int32_t>(index)) ++h;
  q_high = h;
  q_low = static_cast<int>(index) - h * (h + 1) / 2;
  return true;
}

// Packs n indices of E = bits_per_pair bits LSB-first (index i at stream bits [E i, E i + E)) into ceil(E n / 8)
// bytes, padding bits zero; and the inverse. E in kMinEndPairBits..kMaxEndPairBits (scheme.h).
void PackEndPairs(const uint32_t* index, size_t n, int bits_per_pair, uint8_t* out);
void UnpackEndPairs(const uint8_t* in, size_t n, int bits_per_pair, uint32_t* index);
inline size_t EndPairBytes(size_t n, int bits_per_pair) { return (n * static_cast<size_t>(bits_per_pair) + 7) / 8; }

// ---- Conditional-mean anchor tables ----------------------------------------------------------------------

// The tables are the conditional means over a fixed sample of the page: its tokens t with t %
// kAnchorSampleStride == 0, in its first AnchorSampledChannels channels (kAnchorSampleChannels, or every channel
// of a narrower page). 64 channels x 64 tokens of a 256-token page are 4096 values: lynx's eight cell means lose
// 0.5% of the anchor's attention error against counting every channel, finer tables up to 0.9% (docs/CODEC.md
// "Version 3.1"). The 64 channels are exactly one block of the GPU tile encoder (kTileChannels), which then
// finishes the page's tables itself instead of a second kernel summing every block's counts.
inline constexpr int kAnchorSampleStride = 4;
inline constexpr int kAnchorSampleChannels = 64;
inline int AnchorSampledChannels(int channels) {
  return channels < kAnchorSampleChannels ? channels : kAnchorSampleChannels;
}

// The magnitude table of a partial decode that knows the top `known` bits (< b) of the b-bit code, from the
// page's histogram of magnitude codes (count[I], I = 0..M): entry h (0 .. 2^(known-1) - 1) is the mean of
// full_values[I] over the codes of cell h (I in [h 2^u, (h + 1) 2^u), u = b - known), weighted by count, summed
// in double in increasing I and rounded to float; an empty cell gets its code-centre value.
std::vector<float> ConditionalMeanTable(const LynxTables& t, const uint64_t* count, int known);

// x_final for one value: d = x - mu; xf = d * inv_sigma; clamp to [-1, 1]; 0 when inv_sigma == 0 (sigma == 0).
inline float FinalValue(float x, float mu, float inv_sigma) {
  if (inv_sigma == 0.0f) return 0.0f;
  float d = x - mu;
  float xf = d * inv_sigma;
  return Clamp(xf, -1.0f, 1.0f);
}

// Reconstruction: y = mu + sigma * v; clamp to [lo, hi].
inline float Reconstruct(float v, float mu, float sigma, const ChannelFrame& f) {
  float prod = sigma * v;
  float y = mu + prod;
  return Clamp(y, f.lo, f.hi);
}

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_MATH_H_
