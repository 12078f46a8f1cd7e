// The lynx tile encoder's chunk ends (codec_lynx_tile_encode.cu): a lane's two chunk-channels' grid ends from
// their grid positions (proven_ends.h), and the bisection for the frames outside the proofs' domain. Included only
// by that file (the unnamed namespace is deliberate, as in codec_kernels_common.cuh). Compile with --fmad=false.
#ifndef KVT_CODEC_GPU_CODEC_LYNX_TILE_ENDS_CUH_
#define KVT_CODEC_GPU_CODEC_LYNX_TILE_ENDS_CUH_

#include "codec/gpu/codec_kernels_common.cuh"
#include "codec/gpu/proven_ends.h"

namespace kvt::codec::gpu::internal {
namespace {

static_assert(kProvenGridMax == kEndGridMax, "proven_ends.h's grid is the kernels' (lynx_math.h's)");

// The largest q with ChunkEnd(f, q) <= a, and the smallest q >= q_low with ChunkEnd(f, q) >= b, by bisection:
// for frames outside proven_ends.h's domain (offsets past 1024 half-widths, half outside [2^-100, 2^100],
// non-finite ranges, whose encode fails anyway), where any q the search would find is found (ChunkEnd is
// non-decreasing in q). Small in registers, as it is inlined into a 64-register kernel; 12 ChunkEnd evaluations
// an end.
__device__ __forceinline__ int BisectEndBelow(const Frame& f, float a) {
  int below = 0, above = kEndGridMax + 1;  // ChunkEnd(below) <= a (ChunkEnd(0) = lo); `above` past the answer
#pragma unroll 1
  while (above - below > 1) {
    const int mid = (below + above) >> 1;
    if (ChunkEnd(f, mid) <= a) {
      below = mid;
    } else {
      above = mid;
    }
  }
  return below;
}
__device__ __forceinline__ int BisectEndAbove(const Frame& f, float b, int q_low) {
  int below = q_low - 1, above = kEndGridMax;  // ChunkEnd(above) >= b (ChunkEnd(4094) = hi); `below` short of it
#pragma unroll 1
  while (above - below > 1) {
    const int mid = (below + above) >> 1;
    if (ChunkEnd(f, mid) >= b) {
      above = mid;
    } else {
      below = mid;
    }
  }
  return above;
}

// A lane's two chunk-channels' ends (lynx_math.h QuantizeChunkEnds, midrange; q_high before QuantizeEndAbove's
// max with q_low, which the caller takes) and ChunkEnd(f, q) of each, from the targets' grid positions
// (proven_ends.h): one ChunkEnd evaluation an end, straight-line, where the search took four or more a
// chunk-channel in loops that a warp ran whenever one of its 64 chunk-channels needed a step. False when an end is
// left to SearchEnds2: a flat channel, a frame outside the proofs' domain, or a non-finite range.
__device__ __forceinline__ bool ProvenEnds2(const Frame* f, const float* cmin, const float* cmax, int* q_low,
                                            int* q_high, float* end_low, float* end_high) {
  bool proven = true;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const ProvenFrame pf =
        MakeProvenFrame(f[h].lo, f[h].hi, f[h].centre, f[h].half, RoundedReciprocal(f[h].half));
    auto end = [&](int q) { return ChunkEnd(f[h], q); };
    const bool below = ProvenEndBelow(pf, cmin[h], end, &q_low[h], &end_low[h]);
    const bool above = ProvenEndAbove(pf, cmax[h], end, &q_high[h], &end_high[h]);
    proven = proven && below && above;
  }
  return proven;
}

// The same by bisection, one chunk-channel at a time, for a lane ProvenEnds2 leaves (rare). It takes the frames'
// ranges and rebuilds them, and reads the chunk ranges again from shared memory, so that nothing of ProvenEnds2
// stays live for it: in a 64-register kernel that holds its rows throughout, its registers must come from there.
__device__ __forceinline__ void SearchEnds2(const float* lo, const float* hi, const float* s_cmin,
                                            const float* s_cmax, int* q_low, int* q_high, float* end_low,
                                            float* end_high) {
#pragma unroll 1
  for (int h = 0; h < 2; ++h) {
    const Frame f = MakeChannelFrame(h == 0 ? lo[0] : lo[1], h == 0 ? hi[0] : hi[1], kEndGridMax);
    const float a = s_cmin[h], b = s_cmax[h];
    const bool flat = f.half == 0.0f;
    const int ql = flat ? 0 : BisectEndBelow(f, a);
    const int qh = flat ? 0 : BisectEndAbove(f, b, ql);
    const float el = ChunkEnd(f, ql), eh = ChunkEnd(f, qh);
    if (h == 0) {
      q_low[0] = ql, q_high[0] = qh, end_low[0] = el, end_high[0] = eh;
    } else {
      q_low[1] = ql, q_high[1] = qh, end_low[1] = el, end_high[1] = eh;
    }
  }
}

}  // namespace
}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_CODEC_LYNX_TILE_ENDS_CUH_
