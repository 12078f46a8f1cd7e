// The lynx frame-spike selection on the GPU (codec/internal/lynx_frame_spikes.h's rule), as a device function
// that a block calls with its own loads: the selection kernel (codec_frame_spikes_kernels.cu) reads the page from
// global memory, the group encoder (codec_encode_kernels.cu) from the page tile it has staged in shared memory.
// Selection keeps the k + 1 first and last of each channel's (value, token) order, as the CPU does, so both pick
// the same spikes. Like codec_kernels_common.cuh, each including file gets its own copy (unnamed namespace).
#ifndef KVT_CODEC_GPU_CODEC_FRAME_SPIKE_SELECT_CUH_
#define KVT_CODEC_GPU_CODEC_FRAME_SPIKE_SELECT_CUH_

#include "codec/gpu/codec_kernels_common.cuh"

namespace kvt::codec::gpu::internal {
namespace {

// A (value, token) list of kKeep entries in registers, sorted by (value, token) ascending (kUp) or descending;
// Insert puts an entry in its place and drops the last. Unrolled compare-and-swap passes, so the lists never
// leave registers.
template <int kKeep, bool kUp>
struct Extremes {
  float x[kKeep];
  int t[kKeep];
  __device__ __forceinline__ void Clear() {
#pragma unroll
    for (int j = 0; j < kKeep; ++j) {
      x[j] = kUp ? __int_as_float(0x7f800000) : -__int_as_float(0x7f800000);
      t[j] = kUp ? 0x7fffffff : -1;
    }
  }
  __device__ __forceinline__ static bool Before(float ax, int at, float bx, int bt) {
    return kUp ? (ax < bx || (ax == bx && at < bt)) : (ax > bx || (ax == bx && at > bt));
  }
  __device__ __forceinline__ void Insert(float nx, int nt) {
#pragma unroll
    for (int j = 0; j < kKeep; ++j) {
      if (Before(nx, nt, x[j], t[j])) {
        const float sx = x[j];
        const int st = t[j];
        x[j] = nx, t[j] = nt;
        nx = sx, nt = st;
      }
    }
  }
  // Whether a value of a token later than every entry enters the list.
  __device__ __forceinline__ bool Takes(float v) const { return kUp ? v < x[kKeep - 1] : v >= x[kKeep - 1]; }
};

// Block (32 channels, page), lane = channel. The k + 1 first values of a channel's (value, token) order lie in the
// k + 1 chunks whose least values come first in that order (any other chunk has k + 1 values before its least), so
// the kernel finds those chunks (and the k + 1 chunks of the greatest values) from the chunks' extremes, then
// orders only their values: a value is compared a few times, not inserted into lists a warp's 32 lanes would all
// wait on. Warp w takes chunks w, w + 8, ...; then candidate chunk w of each side; warp 0 merges.
constexpr int kSelectWarps = 8;

// The selection of page `page`'s frame spikes in channels [blockIdx.x * 32, + 32) (lane = channel c), by a block
// of kSelectWarps warps that all call it, into `out` (FrameSpikeValues, FrameSpikeTokens, frame_sub).
// load(t, x) reads channel c of token t into x, or returns false (a bad block id, which it reports).
template <int kKeep, typename Load>
__device__ __forceinline__ void SelectFrameSpikes(const Load& load, const PageShape& shape, const Staging& out,
                                                  DeviceStatus* status, int page, int c) {
  constexpr int k = kKeep - 1;
  __shared__ float s_x[2][kSelectWarps][kKeep][32];
  __shared__ int s_t[2][kSelectWarps][kKeep][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int channels = shape.channels, tokens = shape.tokens, len = shape.chunk_len;
  auto save = [&](const Extremes<kKeep, true>& bottom, const Extremes<kKeep, false>& top) {
#pragma unroll
    for (int j = 0; j < kKeep; ++j) {
      s_x[0][warp][j][lane] = bottom.x[j], s_t[0][warp][j][lane] = bottom.t[j];
      s_x[1][warp][j][lane] = top.x[j], s_t[1][warp][j][lane] = top.t[j];
    }
  };
  auto merge = [&](Extremes<kKeep, true>& bottom, Extremes<kKeep, false>& top) {
    for (int w = 1; w < kSelectWarps; ++w) {
#pragma unroll
      for (int j = 0; j < kKeep; ++j) {
        bottom.Insert(s_x[0][w][j][lane], s_t[0][w][j][lane]);
        top.Insert(s_x[1][w][j][lane], s_t[1][w][j][lane]);
      }
    }
  };
  // 1. Every chunk's least and greatest value (the first and last of its (value, token) order); the k + 1 chunks
  // with the first least values and the k + 1 with the last greatest, by those values' entries.
  Extremes<kKeep, true> bottom;
  Extremes<kKeep, false> top;
  bottom.Clear();
  top.Clear();
  if (c < channels) {
    for (int kc = warp; kc < shape.num_chunks; kc += kSelectWarps) {
      const int t0 = kc * len;
      float lo = __int_as_float(0x7f800000), hi = -lo;
      int lo_t = -1, hi_t = -1;
      for (int r = 0; r < len; ++r) {
        float x;
        if (!load(t0 + r, x)) continue;
        if (!isfinite(x)) {  // the encode fails; reported here too, as its replacement would hide it
          ReportNonFinite(status, page, tokens, channels, t0 + r, c);
          continue;
        }
        if (x < lo) lo = x, lo_t = t0 + r;   // the first of equal values
        if (x >= hi) hi = x, hi_t = t0 + r;  // the last of equal values
      }
      if (lo_t >= 0) bottom.Insert(lo, lo_t);
      if (hi_t >= 0) top.Insert(hi, hi_t);
    }
  }
  save(bottom, top);
  __syncthreads();
  if (warp == 0) merge(bottom, top);
  __syncthreads();
  // The candidate chunks, by their extremes' tokens: each warp orders one candidate chunk of each side.
  __shared__ int s_chunk[2][kKeep][32];
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < kKeep; ++j) {
      s_chunk[0][j][lane] = bottom.t[j] >= 0 && bottom.t[j] < tokens ? bottom.t[j] / len : -1;
      s_chunk[1][j][lane] = top.t[j] >= 0 && top.t[j] < tokens ? top.t[j] / len : -1;
    }
  }
  __syncthreads();
  // 2. The k + 1 first and last values of the candidates' values.
  bottom.Clear();
  top.Clear();
  if (c < channels) {
    for (int j = warp; j < 2 * kKeep; j += kSelectWarps) {
      const int side = j < kKeep ? 0 : 1;
      const int kc = s_chunk[side][side == 0 ? j : j - kKeep][lane];
      if (kc < 0) continue;
      for (int r = 0; r < len; ++r) {
        float x;
        if (!load(kc * len + r, x) || !isfinite(x)) continue;
        if (side == 0) {
          bottom.Insert(x, kc * len + r);
        } else {
          top.Insert(x, kc * len + r);
        }
      }
    }
  }
  save(bottom, top);
  __syncthreads();
  if (warp != 0 || c >= channels) return;
  merge(bottom, top);
  // Fewer tokens than kKeep leave sentinels (tokens < 0 or past the page): the launch reports why (a bad block
  // id or a non-finite value), or the page is shorter than the spikes allow, which the shape rules out.
  uint8_t* values = FrameSpikeValues(out, shape, page);
  uint8_t* tokens_at = FrameSpikeTokens(out, shape, page);
  if (bottom.t[k] >= tokens || top.t[k] < 0) {
    // The encode fails (its status says why); tokens no page has keep the encoder from replacing anything.
    for (int j = 0; j < k; ++j) {
      const size_t s = static_cast<size_t>(j) * channels + c;
      tokens_at[2 * s] = tokens_at[2 * s + 1] = 0xFF;
    }
    return;
  }
  int best = 0;
  double best_range = 0;
#pragma unroll
  for (int i = 0; i <= k; ++i) {
    const double range = static_cast<double>(top.x[k - i]) - static_cast<double>(bottom.x[i]);
    if (i == 0 || range < best_range) best = i, best_range = range;
  }
  int tok[k > 0 ? k : 1];
  float val[k > 0 ? k : 1];
#pragma unroll
  for (int j = 0; j < k; ++j) {
    const bool low = j < best;
    tok[j] = low ? bottom.t[j] : top.t[j - best];
    val[j] = low ? bottom.x[j] : top.x[j - best];
  }
#pragma unroll
  for (int i = 1; i < k; ++i) {  // by token (insertion sort over the few spikes)
#pragma unroll
    for (int j = i; j > 0; --j) {
      if (tok[j - 1] > tok[j]) {
        const int tt = tok[j];
        tok[j] = tok[j - 1], tok[j - 1] = tt;
        const float v = val[j];
        val[j] = val[j - 1], val[j - 1] = v;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < k; ++j) {
    const size_t s = static_cast<size_t>(j) * channels + c;
    // The first value may share a 32-bit word with the last end pairs, which the encoder's blocks OR into the
    // zeroed metadata, concurrently when the encoder's own blocks select.
    if (s == 0) {
      StoreF32AfterOredWord(values, val[j]);
    } else {
      StoreF32(values + 4 * s, val[j]);
    }
    tokens_at[2 * s] = static_cast<uint8_t>(tok[j]);
    tokens_at[2 * s + 1] = static_cast<uint8_t>(tok[j] >> 8);
    // The first token of the spike's chunk that is no spike (tokens increase with j).
    int r = tok[j] / shape.chunk_len * shape.chunk_len;
#pragma unroll
    for (int i = 0; i < k; ++i) r += tok[i] == r ? 1 : 0;
    float sub = 0.0f;
    load(r, sub);
    out.frame_sub[static_cast<size_t>(page) * k * channels + s] = sub;
  }
}

}  // namespace
}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_CODEC_FRAME_SPIKE_SELECT_CUH_
