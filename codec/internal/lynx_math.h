// The lynx family's arithmetic, shared by every implementation (scalar reference, AVX2, AVX-512, and the host
// side of the CUDA kernels): the code tables for a given (alpha, code bits), the per-chunk metadata
// quantizers, and the exact float-op sequences that turn stored metadata into the mu/sigma the codes use.
// docs/FORMAT.md and docs/CODEC.md state the same procedure in words. Tables are immutable; thread-safe.
#ifndef KVT_CODEC_INTERNAL_LYNX_MATH_H_
#define KVT_CODEC_INTERNAL_LYNX_MATH_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "codec/options.h"

namespace kvt::codec::internal {

// Everything that depends on (alpha, b) only, b = total code bits (2..8), M = 2^(b-1) - 1.
struct LynxTables {
  float alpha = 0;
  int bits = 0;  // b
  int max_code = 0;  // M
  // thresholds[k] for k in 1..M: t_k = float(expm1(((k - 0.5) / M) * log1p(alpha)) / alpha), in double.
  // The magnitude code of a = |x_final| is I = #{k in 1..M : a >= t_k}. thresholds[0] = 0 (unused).
  std::vector<float> thresholds;
  // full_values[I] = float(expm1((I / M) * log1p(alpha)) / alpha): the full-precision reconstruction.
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
  float guess_scale = 0;  // M / log2(1 + alpha)
  bool log_guess_ok = false;
  std::vector<float> guess_low, guess_high;  // M + 1 entries each

  // Signed reconstruction tables indexed by the known code prefix p (the top `known` bits of the b-bit code
  // sign:I), one per (known bits 1..b, anchor rule): decode_table(known, rule)[p] = +-v. With known == b both
  // rules give full_values.
  const std::vector<float>& decode_table(int known, AnchorRule rule) const {
    return decode_tables[known][rule == AnchorRule::kCodeCentre ? 0 : 1];
  }
  std::array<std::array<std::vector<float>, 2>, 9> decode_tables;
};

// Tables for (alpha, bits); cached, so repeated calls are cheap. Requires alpha in [kMinAlpha, kMaxAlpha], bits 2..8.
std::shared_ptr<const LynxTables> GetLynxTables(float alpha, int bits);

// The log2 guess of the AVX-512 encoder in scalar form (an estimate of y = log2(1 + alpha a) * guess_scale),
// used to verify log_guess_ok: e + 2/ln2 (u + u^3/3 + u^5/5), u = (m - 1)/(m + 1), 1 + alpha a = m 2^e.
double LogGuess(const LynxTables& t, float a);

// The reference definition of the magnitude code.
inline int MagnitudeCode(const LynxTables& t, float a) {
  int i = 0;
  while (i < t.max_code && a >= t.thresholds[i + 1]) ++i;
  return i;
}

// ---- Metadata (per page-channel: lo/hi; per chunk: q_mu, q_sigma) -------------------------------------------

// The frame of one page-channel, from its stored fp32 lo <= hi (finite; a zero is stored as +0).
struct ChannelFrame {
  float lo = 0, hi = 0;
  float centre = 0;  // float(((double)lo + hi) * 0.5)
  float half = 0;    // float(((double)hi - lo) * 0.5): finite even for lo = -3e38, hi = 3e38
};
inline ChannelFrame MakeChannelFrame(float lo, float hi) {
  ChannelFrame f;
  f.lo = lo;
  f.hi = hi;
  f.centre = static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) * 0.5);
  f.half = static_cast<float>((static_cast<double>(hi) - static_cast<double>(lo)) * 0.5);
  return f;
}

// sigma_scale[q] for q in 0..255: 0 for q = 0 (a flat chunk), else 2^(1 - (255 - q) / 16) as
// ldexp(frac[(255 - q) % 16], 1 - (255 - q) / 16), frac[j] = float(2^(-j/16)) (docs/FORMAT.md): from 2^-14.875
// up to 2 = twice the channel's half range, so sigma covers any chunk whatever its centre (|x - mu| <= hi - lo).
const std::array<float, 256>& SigmaScaleTable();

// Float ops, in this order, no contraction (the codec builds with -ffp-contract=off):
//   mu = min(max(centre + half * ((q_mu - 127.0f) / 127.0f), lo), hi)
// The grid has 255 points with one exactly at the channel centre (q_mu = 127); encoders write 0..254, and a
// decoder reading 255 lands on hi by the clamp.
// Clamp(x, lo, hi) = min(max(x, lo), hi) for non-NaN operands (the vector min/max instructions' semantics; only
// the sign of a zero result may differ between implementations, which no code depends on).
inline float Clamp(float x, float lo, float hi) {
  float y = x > lo ? x : lo;
  return y < hi ? y : hi;
}

inline float ChunkMu(const ChannelFrame& f, int q_mu) {
  float off = (static_cast<float>(q_mu) - 127.0f) / 127.0f;
  float prod = f.half * off;
  float mu = f.centre + prod;
  return Clamp(mu, f.lo, f.hi);
}
//   sigma = min(half * sigma_scale[q_sigma], FLT_MAX)   (the product overflows only for ranges near FLT_MAX)
inline float SigmaFromScale(float half, float scale) {
  const float s = half * scale;
  return s < std::numeric_limits<float>::max() ? s : std::numeric_limits<float>::max();
}
inline float ChunkSigma(const ChannelFrame& f, int q_sigma) { return SigmaFromScale(f.half, SigmaScaleTable()[q_sigma]); }
//   inv_sigma = sigma > 0 ? min(1.0f / sigma, FLT_MAX) : 0   (correctly rounded float division; the encoder
// multiplies by it, so a vector path needs no division per value)
inline float InverseSigma(float sigma) {
  if (!(sigma > 0.0f)) return 0.0f;
  float inv = 1.0f / sigma;
  return inv < std::numeric_limits<float>::max() ? inv : std::numeric_limits<float>::max();
}

// q_mu for a target centre m in [lo, hi]: 0 when half == 0, else
//   u = min(max((m - centre) / half, -1), 1); q = nearbyint(u * 127.0f + 127.0f)   (round half to even)
inline int QuantizeMu(const ChannelFrame& f, float m) {
  if (f.half == 0.0f) return 0;
  float u = (m - f.centre) / f.half;
  u = Clamp(u, -1.0f, 1.0f);
  float q = std::nearbyint(u * 127.0f + 127.0f);
  return static_cast<int>(q);
}

// q_sigma: 0 when need <= 0 or half == 0; else the smallest q in 1..255 with half * sigma_scale[q] >= need
// (255 if none), found by binary lifting over the monotone sequence half * sigma_scale[q].
inline int QuantizeSigma(const ChannelFrame& f, float need) {
  if (!(need > 0.0f) || f.half == 0.0f) return 0;
  const auto& s = SigmaScaleTable();
  int pos = 0;  // number of q in 1..255 with half * s[q] < need (a prefix)
  for (int step = 128; step >= 1; step >>= 1) {
    if (pos + step <= 255 && f.half * s[pos + step] < need) pos += step;
  }
  return pos + 1 > 255 ? 255 : pos + 1;
}

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
