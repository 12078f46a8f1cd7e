// A chunk's grid ends from their grid positions, in straight-line code: the lynx tile encoder's replacement for
// the search of lynx_math.h QuantizeEndBelow / QuantizeEndAbove. Plain C++ as well as CUDA, so that
// proven_ends_test.cc checks this very code against the reference's search on the host.
//
// The search evaluates ChunkEnd at four grid points or more a chunk-channel, in loops that a warp runs whenever
// one of its 64 chunk-channels needs a step. Here each target t's position on the grid is computed once,
//   v = ((t - centre) * inv_half) * 2047 + 2047   (f32, each operation rounded to nearest, no fused multiply-add),
// and the end lies in the window [floor(v - W), floor(v + W)] of at most two grid points, which one ChunkEnd
// evaluation tells apart.
//
// Why (u = 2^-24; c = centre, h = half, the floats; t in [lo, hi]):
// - The reference's interior grid point, V(q) = RN(c + RN(h * RN((q - 2047) / 2047))) for 0 < q < 4094, lies
//   within delta = u (|c| + 3.0000003 h) + 2^-148 of the real T(q) = c + h (q - 2047) / 2047: three roundings,
//   each within u of its result, and |(q - 2047) / 2047| < 1.
// - T(v*) = t for the real v* = 2047 + 2047 (t - c) / h. The computed v is within
//   eta = 4.0000004 u 2048.0005 + 2^-13 <= 6.1036e-4 of v* when v lies in [-1, 4095]: four roundings relative to
//   |v - 2047| <= 2048, and the last add's half ulp below 4096. (Where t - c and h are such that d * inv_half
//   comes out subnormal or zero, its error is 2^-150 absolute, far inside the margin; so is |c| * inv_half's.)
//   The window's ends v -+ W round by 2^-13 more.
// - So with W > eta + w + 2^-13, w = 2047 delta / h, every grid point q <= floor(RN(v - W)) has T(q) < t - delta
//   and every q > floor(RN(v + W)) has T(q) > t + delta, hence V(q) < t and V(q) > t respectively.
//   ChunkEnd(q) is V(q) clamped into [lo, hi] (q = 0 is lo and q = 4094 hi exactly) and non-decreasing in q, so
//   the largest q with ChunkEnd(q) <= t (QuantizeEndBelow, for t < hi) lies in the window, and so does one less
//   than the smallest q with ChunkEnd(q) >= t (QuantizeEndAbove before its max with q_low, for t > lo); t = hi
//   and t = lo give 4094 and 0 directly.
// - w <= 2047 u (|c| / h + 3.0000003) + 2^-37 for h >= 2^-100, and |c| / h <= r (1 + 3 u) for
//   r = RN(|c| * inv_half); so eta + w + 2^-13 <= 1.09846e-3 + 1.22013e-4 r, and W = RN(1.2e-3 + RN(1.25e-4 r))
//   exceeds it. The constant has about 9% to spare, the r term 2.5%: the proof, not a margin, carries it (a test
//   with 1.21e-4 for 1.25e-4 fails). r <= 1024 keeps W < 0.13, so the window holds at most two grid points (it
//   would up to r of about 3900; 1024 is a round, conservative edge).
// The frame must satisfy 2^-100 <= h <= 2^100 and r <= 1024 (ProvenFrame::ok; a flat channel, h = 0, is not in
// it): outside, and for targets outside [lo, hi] or NaN, the functions answer false and the caller searches.
#ifndef KVT_CODEC_GPU_PROVEN_ENDS_H_
#define KVT_CODEC_GPU_PROVEN_ENDS_H_

#include <cmath>

#include "numerics/host_device.h"

namespace kvt::codec::gpu::internal {

constexpr int kProvenGridMax = 4094;  // lynx_math.h kEndGridMax (static_asserts in the kernel and the test tie them)

// What the proofs need of a page-channel's frame (lynx_math.h ChannelFrame: lo <= hi, centre, half).
struct ProvenFrame {
  float lo, hi, centre;
  float inv_half;  // RN(1 / half)
  float slack;     // W
  bool ok;         // 2^-100 <= half <= 2^100 and RN(|centre| * inv_half) <= 1024
};

KVT_HOST_DEVICE float RoundedReciprocal(float x) {
#ifdef __CUDA_ARCH__
  return __frcp_rn(x);
#else
  return 1.0f / x;
#endif
}

KVT_HOST_DEVICE ProvenFrame MakeProvenFrame(float lo, float hi, float centre, float half, float inv_half) {
  ProvenFrame p;
  p.lo = lo;
  p.hi = hi;
  p.centre = centre;
  p.inv_half = inv_half;
  const float r = fabsf(centre) * inv_half;  // NaN or inf only outside the domain, where `ok` is false
  p.ok = half >= 0x1p-100f && half <= 0x1p100f && r <= 1024.0f;
  p.slack = 1.2e-3f + 1.25e-4f * r;
  return p;
}

KVT_HOST_DEVICE int ClampInt(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

// The window of target t: floor(RN(v - W)) and floor(RN(v + W)); false outside the domain.
KVT_HOST_DEVICE bool EndWindow(const ProvenFrame& p, float t, int& first, int& last) {
  if (!p.ok || !(t >= p.lo && t <= p.hi)) return false;  // NaN too
  const float d = t - p.centre;
  const float u = d * p.inv_half;
  const float y = u * 2047.0f;
  const float v = y + 2047.0f;
  if (!(v >= -1.0f && v <= 4095.0f)) return false;
  first = static_cast<int>(floorf(v - p.slack));
  last = static_cast<int>(floorf(v + p.slack));
  return true;
}

// QuantizeEndBelow(frame, a), the largest q with ChunkEnd(q) <= a, into *q and ChunkEnd(*q) into *end_at; false
// outside the domain. `end(q)` is the frame's ChunkEnd. One evaluation, two where the window straddles a grid
// point and its upper point lies past a. (The clamps are defensive: for a in [lo, hi) the window lies in
// [0, 4093] already.)
template <typename End>
KVT_HOST_DEVICE bool ProvenEndBelow(const ProvenFrame& p, float a, End end, int* q, float* end_at) {
  int first, last;
  if (!EndWindow(p, a, first, last)) return false;
  if (a == p.hi) {
    *q = kProvenGridMax;
    *end_at = p.hi;
    return true;
  }
  const int g0 = ClampInt(first, 0, kProvenGridMax - 1), g1 = ClampInt(last, 0, kProvenGridMax - 1);
  const float e1 = end(g1);
  if (e1 <= a) {
    *q = g1;
    *end_at = e1;
  } else {
    *q = g0;
    *end_at = end(g0);
  }
  return true;
}

// The smallest q with ChunkEnd(q) >= b into *q (QuantizeEndAbove(frame, b, q_low) is the larger of it and q_low)
// and ChunkEnd(*q) into *end_at; false outside the domain. (The clamps are defensive, as above.)
template <typename End>
KVT_HOST_DEVICE bool ProvenEndAbove(const ProvenFrame& p, float b, End end, int* q, float* end_at) {
  int first, last;
  if (!EndWindow(p, b, first, last)) return false;
  if (b == p.lo) {
    *q = 0;
    *end_at = p.lo;
    return true;
  }
  const int h0 = ClampInt(first + 1, 1, kProvenGridMax), h1 = ClampInt(last + 1, 1, kProvenGridMax);
  const float e0 = end(h0);
  if (e0 >= b) {
    *q = h0;
    *end_at = e0;
  } else {
    *q = h1;
    *end_at = end(h1);
  }
  return true;
}

}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_PROVEN_ENDS_H_
