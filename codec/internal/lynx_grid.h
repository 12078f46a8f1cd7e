// The lynx chunk-end grid (docs/FORMAT.md, "From metadata to the chunk's centre and half-width"): a page-channel's
// frame, the grid of chunk ends over it, the search for a chunk's stored ends and the centre and width
// they give. One definition, host and device (numerics/host_device.h): the CPU reference (lynx_math.h) and the
// CUDA kernels (codec/gpu) both run these functions, so their metadata agree by construction. The vector CPU
// paths keep their own lane-wise forms, checked against these by the byte-identity tests.
//
// Float ops in the order written, no contraction: the codec builds with -ffp-contract=off, the kernels with
// --fmad=false.
#ifndef KVT_CODEC_INTERNAL_LYNX_GRID_H_
#define KVT_CODEC_INTERNAL_LYNX_GRID_H_

#include <array>
#include <cstdint>

#include "numerics/host_device.h"

namespace kvt::codec::internal {

inline constexpr float kFloatMax = 3.40282347e+38f;  // FLT_MAX

// A chunk's interval [ChunkEnd(q_low), ChunkEnd(q_high)] has its ends on a grid of G + 1 points over the
// page-channel range: q in 0..G, q = 0 exactly lo, q = G exactly hi, q = G / 2 exactly the channel centre. The
// pair (q_low <= q_high) is stored as one index of E bits (Scheme::end_pair_bits), q_high * (q_high + 1) / 2 +
// q_low; G = EndGridMax(E) is the largest even number whose largest index, G * (G + 3) / 2, fits E bits: 4094 for
// version 3's 23 bits, 178 for the default 14 (docs/FORMAT.md).
KVT_HOST_DEVICE constexpr int EndGridMax(int end_pair_bits) {
  int g = 0;
  while (static_cast<int64_t>(g + 2) * (g + 5) / 2 < (int64_t{1} << end_pair_bits)) g += 2;
  return g;
}
inline constexpr int kEndGridMax = EndGridMax(23);  // version 3's grid
static_assert(kEndGridMax == 4094 && EndGridMax(14) == 178 && EndGridMax(8) == 20, "the documented grids");
KVT_HOST_DEVICE constexpr uint32_t MaxEndPairIndex(int grid_max) {
  return static_cast<uint32_t>(grid_max) * static_cast<uint32_t>(grid_max + 3) / 2;
}

// The frame of one page-channel, from its stored fp32 lo <= hi (finite; a zero is stored as +0), and the grid
// of its chunk ends.
struct ChannelFrame {
  float lo = 0, hi = 0;
  float centre = 0;  // float(((double)lo + hi) * 0.5)
  float half = 0;    // float(((double)hi - lo) * 0.5): finite even for lo = -3e38, hi = 3e38
  int grid_max = kEndGridMax;  // G: EndGridMax(end_pair_bits)
};
KVT_HOST_DEVICE ChannelFrame MakeChannelFrame(float lo, float hi, int grid_max) {
  ChannelFrame f;
  f.lo = lo;
  f.hi = hi;
  f.centre = static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) * 0.5);
  f.half = static_cast<float>((static_cast<double>(hi) - static_cast<double>(lo)) * 0.5);
  f.grid_max = grid_max;
  return f;
}

// Clamp(x, lo, hi) = min(max(x, lo), hi) for non-NaN operands (the vector min/max instructions' semantics; only
// the sign of a zero result may differ between implementations, which no code depends on).
KVT_HOST_DEVICE float Clamp(float x, float lo, float hi) {
  float y = x > lo ? x : lo;
  return y < hi ? y : hi;
}

// (q - C) / C for q in 0..G, C = G / 2, correctly rounded to float, without a float division: n = q - C in
// [-C, C] times 1 / C in double is within 2^-52 (relative) of n / C, while n / C with C = 2^a m, m odd and at most
// 2047, is exact (a dyadic) or has a period-m binary expansion that stays at least about 2^-36 (relative) from
// every float rounding boundary, so rounding the double to float gives the correctly rounded quotient.
// lynx_math_test checks it against the f32 division for every q of every grid.
KVT_HOST_DEVICE float EndOffset(int q, int grid_max) {
  const int c = grid_max >> 1;
  return static_cast<float>(static_cast<double>(q - c) * (1.0 / c));
}

// Float ops, in this order, no contraction (the codec builds with -ffp-contract=off):
//   q <= 0: lo;  q >= G: hi;  else min(max(centre + half * ((q - C) / C), lo), hi)   (C = G / 2)
// Non-decreasing in q. Without branches (the grid value of any q is computed, then replaced at the ends by two
// selects), so that the kernels' many call sites need no divergence bookkeeping.
KVT_HOST_DEVICE float ChunkEnd(const ChannelFrame& f, int q) {
  const float prod = f.half * EndOffset(q, f.grid_max);
  const float v = Clamp(f.centre + prod, f.lo, f.hi);
  return q <= 0 ? f.lo : (q >= f.grid_max ? f.hi : v);
}

// The grid point nearest below a target end, as a first guess for QuantizeEnd*: floor((a - centre) / half * C +
// C) clamped into the grid; requires half > 0. Only the speed of the searches depends on it.
KVT_HOST_DEVICE int GuessEnd(const ChannelFrame& f, float a) {
  const float c = static_cast<float>(f.grid_max >> 1);
  float u = Clamp((a - f.centre) / f.half, -1.0f, 1.0f);
  int g = static_cast<int>(u * c + c);  // u in [-1, 1]: truncation is floor
  return g < 0 ? 0 : (g > f.grid_max ? f.grid_max : g);
}

// q_low for a target lower end a in [lo, hi]: 0 when half == 0, else the largest q in 0..G with ChunkEnd(q) <= a
// (exists: ChunkEnd(0) = lo).
KVT_HOST_DEVICE int QuantizeEndBelow(const ChannelFrame& f, float a) {
  if (f.half == 0.0f) return 0;
  int q = GuessEnd(f, a);
  while (q > 0 && ChunkEnd(f, q) > a) --q;
  while (q < f.grid_max && ChunkEnd(f, q + 1) <= a) ++q;
  return q;
}

// q_high for a target upper end b in [lo, hi]: 0 when half == 0, else the smallest q in q_low..G with
// ChunkEnd(q) >= b (exists: ChunkEnd(G) = hi).
KVT_HOST_DEVICE int QuantizeEndAbove(const ChannelFrame& f, float b, int q_low) {
  if (f.half == 0.0f) return 0;
  int q = GuessEnd(f, b);
  if (q < q_low) q = q_low;
  while (q > q_low && ChunkEnd(f, q - 1) >= b) --q;
  while (q < f.grid_max && ChunkEnd(f, q) < b) ++q;
  return q;
}

// The chunk's centre and half-width from its stored ends, f32 ops in this order:
//   a = ChunkEnd(q_low), b = ChunkEnd(q_high), mu = min(max(0.5f * a + 0.5f * b, a), b),
//   sigma = min(max(b - mu, mu - a), FLT_MAX)
// so every x in [a, b] has |x - mu| <= sigma in float arithmetic too (rounding is monotone).
KVT_HOST_DEVICE void ChunkCentreAndWidth(const ChannelFrame& f, int q_low, int q_high, float& mu, float& sigma) {
  const float a = ChunkEnd(f, q_low);
  const float b = ChunkEnd(f, q_high);
  const float ha = 0.5f * a;
  const float hb = 0.5f * b;
  const float m = Clamp(ha + hb, a, b);
  const float up = b - m;
  const float down = m - a;
  const float s = up > down ? up : down;
  mu = m;
  sigma = s < kFloatMax ? s : kFloatMax;
}

// The target interval of a chunk with minimum cmin, maximum cmax and target centre m (in [cmin, cmax]) in
// its channel's frame: midrange [cmin, cmax]; mean (centering_mean) [m - d, m + d] with d = max(cmax - m, m - cmin), widened
// to include [cmin, cmax] against rounding and clipped to [lo, hi]. Then its stored ends (q_low, q_high).
KVT_HOST_DEVICE void QuantizeChunkEnds(const ChannelFrame& f, bool centering_mean, float cmin, float cmax, float m,
                                       int& q_low, int& q_high) {
  float a = cmin, b = cmax;
  if (centering_mean) {
    const float up = cmax - m;
    const float down = m - cmin;
    const float d = up > down ? up : down;
    const float ma = m - d;
    const float mb = m + d;
    a = ma < cmin ? ma : cmin;
    a = a > f.lo ? a : f.lo;
    b = mb > cmax ? mb : cmax;
    b = b < f.hi ? b : f.hi;
  }
  q_low = QuantizeEndBelow(f, a);
  q_high = QuantizeEndAbove(f, b, q_low);
}

// The stored index of an end pair q_low <= q_high: q_high * (q_high + 1) / 2 + q_low.
KVT_HOST_DEVICE uint32_t EndPairIndex(int q_low, int q_high) {
  return static_cast<uint32_t>(q_high) * static_cast<uint32_t>(q_high + 1) / 2 + static_cast<uint32_t>(q_low);
}

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_GRID_H_
