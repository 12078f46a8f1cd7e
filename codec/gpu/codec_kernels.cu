// CUDA kernels of every codec scheme (codec_kernels.h). Each kernel performs, per value, exactly the float
// operations of the scalar reference (codec/internal/lynx_math.h, lynx_kernels_ref.cc, baselines.cc,
// float_formats.cc) in the same order; this file is compiled with --fmad=false so nothing is contracted. The
// lynx family clamps with lynx_math.h's Clamp (compare-and-select); the baselines' std::fmin / std::fmax become
// RefFmin / RefFmax, which return the first argument on ties as glibc does (the sign of a zero can reach the
// int8/int4 metadata).
//
// Encode (lynx, int8, int4): one block per (page, group of 32 channels). The page's tile of that group is
// loaded once with 16-byte loads into shared memory (pages up to 256 tokens; longer pages are read from
// global memory twice), per-channel range and per-chunk statistics are computed by one thread per
// (chunk, channel), then each warp codes one token row (a lane per channel) and packs every stream's bit
// fields with shuffles into whole 32-bit words (atomicOr only on words shared with a neighbouring group).
// Decode: one block per (page, 128 channels, 128 tokens); a thread decodes 8 channels of 8 consecutive tokens,
// reading each stream's fields with one aligned load and writing the output dtype with 16-byte stores.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "codec/gpu/codec_kernels.h"

namespace kvt::codec::gpu::internal {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 32;                        // channels per encode block: one per lane
constexpr int kRounds = kThreads / kGroup;        // chunk rows whose statistics one round computes
constexpr int kMaxStagedTokens = 256;             // tile = tokens * 32 floats <= 32 KiB of shared memory
constexpr int kDecodeVecThreads = 16;             // threads across channels in a decode block
constexpr int kDecodeSlices = kThreads / kDecodeVecThreads;
constexpr int kDecodeTokensPerThread = 8;
constexpr int kDecodeTileTokens = kDecodeSlices * kDecodeTokensPerThread;  // 128
constexpr int kDecodeMinBlocks = 3;  // caps registers at 85 so three 256-thread blocks share an SM
constexpr unsigned kFull = 0xffffffffu;

// ---- The reference's float semantics -------------------------------------------------------------------

__device__ __forceinline__ float RefFmin(float x, float y) {
  return x <= y ? x : (y < x ? y : (isnan(y) ? x : y));
}
__device__ __forceinline__ float RefFmax(float x, float y) {
  return x >= y ? x : (y > x ? y : (isnan(y) ? x : y));
}

// lynx_math.h, operation for operation.
__device__ __forceinline__ float Clamp(float x, float lo, float hi) {
  float y = x > lo ? x : lo;
  return y < hi ? y : hi;
}
struct Frame {
  float lo, hi, centre, half;
};
__device__ __forceinline__ Frame MakeFrame(float lo, float hi) {
  Frame f;
  f.lo = lo;
  f.hi = hi;
  f.centre = static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) * 0.5);
  f.half = static_cast<float>((static_cast<double>(hi) - static_cast<double>(lo)) * 0.5);
  return f;
}
__device__ __forceinline__ float ChunkMu(const Frame& f, int q_mu) {
  float off = (static_cast<float>(q_mu) - 127.0f) / 127.0f;
  float prod = f.half * off;
  float mu = f.centre + prod;
  return Clamp(mu, f.lo, f.hi);
}
__device__ __forceinline__ float InverseSigma(float sigma) {
  if (!(sigma > 0.0f)) return 0.0f;
  float inv = 1.0f / sigma;
  return inv < 3.40282347e+38f ? inv : 3.40282347e+38f;
}
__device__ __forceinline__ int QuantizeMu(const Frame& f, float m) {
  if (f.half == 0.0f) return 0;
  float u = (m - f.centre) / f.half;
  u = Clamp(u, -1.0f, 1.0f);
  float p = u * 127.0f;
  float q = rintf(p + 127.0f);
  return static_cast<int>(q);
}
__device__ __forceinline__ int QuantizeSigma(const Frame& f, float need, const float* sscale) {
  if (!(need > 0.0f) || f.half == 0.0f) return 0;
  int pos = 0;
  for (int step = 128; step >= 1; step >>= 1) {
    if (pos + step <= 255 && f.half * sscale[pos + step] < need) pos += step;
  }
  return pos + 1 > 255 ? 255 : pos + 1;
}
__device__ __forceinline__ float Reconstruct(float v, float mu, float sigma, float lo, float hi) {
  float prod = sigma * v;
  float y = mu + prod;
  return Clamp(y, lo, hi);
}

// float_formats.cc, operation for operation.
__device__ __forceinline__ float F16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24, exact
    return sign ? -v : v;
  }
  if (exp == 31) return __uint_as_float(sign | 0x7F800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}
__device__ __forceinline__ uint16_t F16NearestMagnitude(float ax) {
  uint32_t b = __float_as_uint(ax);
  int32_t exp = static_cast<int32_t>(b >> 23) - 127;
  if (exp < -25) return 0;
  if (exp < -14) return static_cast<uint16_t>(rintf(ax * 16777216.0f));  // ldexp(ax, 24): exact
  if (exp > 15) return 0x7C00;
  uint32_t mant = b & 0x7FFFFF;
  uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(h);
}
// mode: 1 = round down, 2 = round up (F16Round::kDown / kUp).
__device__ __forceinline__ uint16_t FloatToF16(float x, int mode) {
  constexpr uint16_t kMaxMag = 0x7BFF;
  bool neg = signbit(x);
  float ax = fabsf(x);
  uint16_t mag = F16NearestMagnitude(ax);
  if (mag > kMaxMag) mag = kMaxMag;
  float got = F16ToFloat(mag);
  bool want_smaller = (mode == 1 && !neg) || (mode == 2 && neg);
  bool want_larger = (mode == 1 && neg) || (mode == 2 && !neg);
  if (want_smaller && got > ax && mag > 0) --mag;
  if (want_larger && got < ax && mag < kMaxMag) ++mag;
  return static_cast<uint16_t>((neg ? 0x8000 : 0) | mag);
}
__device__ __forceinline__ uint16_t FloatToBf16Sat(float x) {
  uint32_t b = __float_as_uint(x);
  uint32_t rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16;
  if ((rounded & 0x7F80) == 0x7F80) rounded = (rounded & 0x8000) | 0x7F7F;
  return static_cast<uint16_t>(rounded);
}
__device__ __forceinline__ bool E4m3IsNan(uint32_t code) { return (code & 0x7F) == 0x7F; }
__device__ __forceinline__ float E4m3ToFloat(uint32_t code) {
  uint32_t exp = (code >> 3) & 0xF;
  uint32_t mant = code & 7;
  float v = exp == 0 ? ldexpf(static_cast<float>(mant), -9)
                     : ldexpf(static_cast<float>(8 + mant), static_cast<int>(exp) - 10);
  return (code & 0x80) ? -v : v;
}
__device__ __forceinline__ uint8_t FloatToE4m3(float x) {
  uint8_t sign = signbit(x) ? 0x80 : 0;
  float ax = fabsf(x);
  if (!(ax < 448.0f)) return sign | 0x7E;
  uint8_t mag;
  if (ax < 0.015625f) {
    mag = static_cast<uint8_t>(rintf(ax * 512.0f));
  } else {
    uint32_t b = __float_as_uint(ax);
    uint32_t r = (b + 0x7FFFF + ((b >> 20) & 1)) >> 20;
    uint32_t m = r - (120u << 3);
    mag = m > 0x7E ? 0x7E : static_cast<uint8_t>(m);
  }
  return sign | mag;
}

// ---- Element types and addressing ----------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Element offset of (page, token t) channel 0's row, or false for a block id out of range.
__device__ __forceinline__ bool RowBase(const KvGeometry& g, int channels, int page, int t, size_t& base) {
  const int j = t / g.block_tokens;
  const int r = t - j * g.block_tokens;
  const int b = g.block_ids[static_cast<size_t>(page) * g.blocks_per_page + j];
  if (b < 0 || b >= g.num_blocks) return false;
  if (g.layout == Layout::kNHD) {
    base = (static_cast<size_t>(b) * g.block_tokens + r) * channels;
  } else {
    base = static_cast<size_t>(b) * g.heads * g.block_tokens * g.head_dim + static_cast<size_t>(r) * g.head_dim;
  }
  return true;
}
__device__ __forceinline__ size_t ChannelOffset(const KvGeometry& g, size_t base, int c) {
  if (g.layout == Layout::kNHD) return base + c;
  const int h = c / g.head_dim;
  const int d = c - h * g.head_dim;
  return base + static_cast<size_t>(h) * g.block_tokens * g.head_dim + d;
}

// Loads VEC consecutive elements (16 bytes when VEC > 1) as floats.
template <typename T, int VEC>
__device__ __forceinline__ void LoadVec(const T* p, float* out) {
  if constexpr (VEC == 1) {
    out[0] = ToFloat<T>(p[0]);
  } else {
    static_assert(VEC * sizeof(T) == 16, "vector loads are 16 bytes");
    uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = ToFloat<T>(e[i]);
  }
}
template <typename T, int VEC>
__device__ __forceinline__ void StoreVec(T* p, const float* v) {
  if constexpr (VEC == 1) {
    p[0] = FromFloat<T>(v[0]);
  } else {
    constexpr int kPer16 = 16 / sizeof(T);
#pragma unroll
    for (int part = 0; part < VEC / kPer16; ++part) {
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int i = 0; i < kPer16; ++i) e[i] = FromFloat<T>(v[part * kPer16 + i]);
      *reinterpret_cast<uint4*>(p + part * kPer16) = raw;
    }
  }
}

__device__ __forceinline__ void ReportNonFinite(DeviceStatus* st, int page, int tokens, int channels, int t, int c) {
  const unsigned long long i =
      (static_cast<unsigned long long>(page) * tokens + t) * static_cast<unsigned long long>(channels) + c;
  atomicMin(&st->first_non_finite, i);
}

// ---- Bit packing ---------------------------------------------------------------------------------------

// The warp writes the w-bit fields of lanes [0, nvalid) at stream bits [bit0, bit0 + nvalid * w) (LSB first,
// bitpack.h's order). Words wholly inside the range are stored; the first and last, when shared with another
// group's range, are OR-ed in (the caller zeroed the stream). All 32 lanes must call.
__device__ __forceinline__ void PackRow(uint32_t* words, unsigned long long bit0, int w, int nvalid, uint32_t field,
                                        int lane) {
  const int shift = static_cast<int>(bit0 & 31);
  uint32_t* base = words + (bit0 >> 5);
  const int total = shift + nvalid * w;
  const int nwords = (total + 31) >> 5;
  int first = (32 * lane - shift) / w;
  if (first < 0) first = 0;
  const int iters = 32 / w + 2;
  uint32_t word = 0;
  for (int m = 0; m < iters; ++m) {
    const int src = first + m;
    const uint32_t v = __shfl_sync(kFull, field, src & 31);
    const int pos = shift + src * w - 32 * lane;
    if (src < nvalid && pos > -w && pos < 32) word |= pos >= 0 ? (v << pos) : (v >> (-pos));
  }
  if (lane < nwords) {
    const bool whole = (lane > 0 || shift == 0) && 32 * (lane + 1) <= total;
    if (whole) {
      base[lane] = word;
    } else {
      atomicOr(base + lane, word);
    }
  }
}

// Field i (w bits) of a packed stream.
__device__ __forceinline__ uint32_t ReadField(const uint32_t* words, unsigned long long i, int w) {
  const unsigned long long p = i * static_cast<unsigned long long>(w);
  const uint32_t off = static_cast<uint32_t>(p & 31);
  uint32_t v = words[p >> 5] >> off;
  if (off + w > 32) v |= words[(p >> 5) + 1] << (32 - off);
  return v & ((1u << w) - 1);
}
// Fields of 8 consecutive values starting at value i (a multiple of 8): 8 * w bits from one aligned load.
__device__ __forceinline__ unsigned long long Read8Fields(const uint8_t* bytes, unsigned long long i, int w) {
  const uint8_t* p = bytes + (i >> 3) * w;
  switch (w) {
    case 1:
      return *p;
    case 2:
      return *reinterpret_cast<const uint16_t*>(p);
    case 4:
      return *reinterpret_cast<const uint32_t*>(p);
    case 8:
      return *reinterpret_cast<const unsigned long long*>(p);
    default: {
      unsigned long long v = 0;
      for (int b = 0; b < w; ++b) v |= static_cast<unsigned long long>(p[b]) << (8 * b);
      return v;
    }
  }
}

// ---- Encode: lynx family and uniform int8/int4 ---------------------------------------------------------

struct EncodeParams {
  KvGeometry src;
  PageShape shape;
  Staging out;
  DeviceStatus* status;
  int num_streams;
  int stage_bits[kMaxStreams];
  int total_bits;
  bool centering_mean;
};

template <typename T, int VEC, bool kLynx, bool kStaged>
__global__ void __launch_bounds__(kThreads)
    EncodeGroupKernel(const EncodeParams p, const __grid_constant__ LynxDeviceTables tb) {
  extern __shared__ float tile[];  // [tokens][kGroup] when kStaged
  __shared__ float s_thr[128];
  __shared__ float s_sscale[256];
  __shared__ Frame s_frame[kGroup];
  __shared__ float s_red_lo[kRounds][kGroup];
  __shared__ float s_red_hi[kRounds][kGroup];
  __shared__ float s_p0[kRounds][kGroup];  // lynx: mu; uniform: min
  __shared__ float s_p1[kRounds][kGroup];  // lynx: 1 / sigma (InverseSigma); uniform: scale

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int page = blockIdx.y;
  const int c0 = blockIdx.x * kGroup;
  const int tokens = p.shape.tokens;
  const int channels = p.shape.channels;
  const int nvalid = min(kGroup, channels - c0);
  const T* src = static_cast<const T*>(p.src.data);

  if constexpr (kLynx) {
    if (tid < 128) s_thr[tid] = tb.thresholds[tid];
    s_sscale[tid] = tb.sigma_scale[tid];
  }

  // Value (t, c0 + c) from global memory; 0 (and an error) for a bad block id.
  auto load_global = [&](int t, int c) -> float {
    size_t base;
    if (!RowBase(p.src, channels, page, t, base)) {
      atomicOr(&p.status->errors, kErrBadBlockId);
      return 0.0f;
    }
    return ToFloat<T>(src[ChannelOffset(p.src, base, c0 + c)]);
  };
  if constexpr (kStaged) {
    const int vpr = nvalid / VEC;
    const int total = tokens * vpr;
    constexpr int kBatch = 4;
    for (int i0 = tid; i0 < total; i0 += kThreads * kBatch) {
      float v[kBatch][VEC];
      int slot[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kThreads;
        slot[u] = -1;
        if (i < total) {
          const int t = i / vpr;
          const int j = i - t * vpr;
          slot[u] = t * kGroup + j * VEC;
          size_t base;
          if (RowBase(p.src, channels, page, t, base)) {
            LoadVec<T, VEC>(src + ChannelOffset(p.src, base, c0 + j * VEC), v[u]);
          } else {
            atomicOr(&p.status->errors, kErrBadBlockId);
#pragma unroll
            for (int e = 0; e < VEC; ++e) v[u][e] = 0.0f;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (slot[u] >= 0) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) tile[slot[u] + e] = v[u][e];
        }
      }
    }
  }
  __syncthreads();
  auto value = [&](int t, int c) -> float {
    if constexpr (kStaged) {
      return tile[t * kGroup + c];
    } else {
      return load_global(t, c);
    }
  };

  uint8_t* meta = p.out.meta + page * p.out.meta_stride;
  const size_t chunk_values = static_cast<size_t>(p.shape.num_chunks) * channels;

  // Lynx: the page-channel range first (lynx_kernels_ref.cc RefStatsRange).
  if constexpr (kLynx) {
    const int c = tid % kGroup;
    const int s = tid / kGroup;
    float lo = __int_as_float(0x7f800000);
    float hi = -lo;
    if (c < nvalid) {
      for (int t = s; t < tokens; t += kRounds) {
        const float x = value(t, c);
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
    }
    s_red_lo[s][c] = lo;
    s_red_hi[s][c] = hi;
    __syncthreads();
    if (tid < nvalid) {
      lo = s_red_lo[0][tid];
      hi = s_red_hi[0][tid];
      for (int r = 1; r < kRounds; ++r) {
        if (s_red_lo[r][tid] < lo) lo = s_red_lo[r][tid];
        if (s_red_hi[r][tid] > hi) hi = s_red_hi[r][tid];
      }
      lo = lo == 0.0f ? 0.0f : lo;  // canonical zero
      hi = hi == 0.0f ? 0.0f : hi;
      s_frame[tid] = MakeFrame(lo, hi);
      reinterpret_cast<float*>(meta)[c0 + tid] = lo;
      reinterpret_cast<float*>(meta)[channels + c0 + tid] = hi;
    }
    __syncthreads();
  }

  const int chunk_len = p.shape.chunk_len;
  const int num_chunks = p.shape.num_chunks;
  const float qmax = static_cast<float>((1 << p.total_bits) - 1);
  for (int k0 = 0; k0 < num_chunks; k0 += kRounds) {
    {
      const int kl = tid / kGroup;
      const int c = tid % kGroup;
      const int k = k0 + kl;
      if (k < num_chunks && c < nvalid) {
        const int t0 = k * chunk_len;
        const size_t i = static_cast<size_t>(k) * channels + c0 + c;
        float cmin = __int_as_float(0x7f800000);
        float cmax = -cmin;
        for (int t = 0; t < chunk_len; ++t) {
          const float x = value(t0 + t, c);
          if (!isfinite(x)) ReportNonFinite(p.status, page, tokens, channels, t0 + t, c0 + c);
          if constexpr (kLynx) {
            if (x < cmin) cmin = x;
            if (x > cmax) cmax = x;
          } else {
            cmin = RefFmin(cmin, x);
            cmax = RefFmax(cmax, x);
          }
        }
        if constexpr (kLynx) {
          float centre;
          if (!p.centering_mean) {
            float a = 0.5f * cmin;
            float b = 0.5f * cmax;
            centre = a + b;
          } else {
            const float inv = 1.0f / static_cast<float>(chunk_len);
            float sum = 0.0f;
            for (int t = 0; t < chunk_len; ++t) {
              float term = value(t0 + t, c) * inv;
              sum = sum + term;
            }
            centre = sum;
          }
          centre = Clamp(centre, cmin, cmax);
          const Frame f = s_frame[c];
          const int qm = QuantizeMu(f, centre);
          const float mu = ChunkMu(f, qm);
          const float above = cmax - mu;
          const float below = mu - cmin;
          const float need = above > below ? above : below;
          const int qs = QuantizeSigma(f, need, s_sscale);
          meta[8 * static_cast<size_t>(channels) + i] = static_cast<uint8_t>(qm);
          meta[8 * static_cast<size_t>(channels) + chunk_values + i] = static_cast<uint8_t>(qs);
          s_p0[kl][c] = mu;
          s_p1[kl][c] = InverseSigma(f.half * s_sscale[qs]);
        } else {
          const uint16_t m16 = FloatToF16(cmin, 1);
          const float m = F16ToFloat(m16);
          const float span = cmax - m;
          const float want = span / qmax;
          const uint16_t s16 = FloatToF16(want, 2);
          reinterpret_cast<uint16_t*>(meta)[i] = m16;
          reinterpret_cast<uint16_t*>(meta)[chunk_values + i] = s16;
          s_p0[kl][c] = m;
          s_p1[kl][c] = F16ToFloat(s16);
        }
      }
    }
    __syncthreads();
    const int t_begin = k0 * chunk_len;
    const int t_end = min(num_chunks, k0 + kRounds) * chunk_len;
    for (int t = t_begin + warp; t < t_end; t += kThreads / 32) {
      const int kl = (t - t_begin) / chunk_len;
      uint32_t code = 0;
      if (lane < nvalid) {
        const float x = value(t, lane);
        const float a0 = s_p0[kl][lane];
        const float a1 = s_p1[kl][lane];
        if constexpr (kLynx) {
          float xf = 0.0f;
          if (a1 != 0.0f) {
            const float d = x - a0;
            xf = Clamp(d * a1, -1.0f, 1.0f);
          }
          const uint32_t neg = xf < 0.0f ? 1u : 0u;
          const float a = fabsf(xf);
          const int m = tb.max_code;
          int mag = __float2int_rn(__logf(1.0f + tb.alpha * a) * tb.inv_log1p_alpha * static_cast<float>(m));
          mag = mag < 0 ? 0 : (mag > m ? m : mag);
          while (mag > 0 && a < s_thr[mag]) --mag;
          while (mag < m && a >= s_thr[mag + 1]) ++mag;
          code = (neg << (tb.bits - 1)) | static_cast<uint32_t>(mag);
        } else {
          float q = 0.0f;
          if (a1 > 0.0f) {
            q = rintf((x - a0) / a1);
            q = RefFmin(RefFmax(q, 0.0f), qmax);
          }
          code = static_cast<uint32_t>(q);
        }
      }
      int shift = p.total_bits;
      const unsigned long long row = static_cast<unsigned long long>(t) * channels + c0;
      for (int s = 0; s < p.num_streams; ++s) {
        const int w = p.stage_bits[s];
        shift -= w;
        const uint32_t field = (code >> shift) & ((1u << w) - 1);
        uint32_t* words = reinterpret_cast<uint32_t*>(p.out.codes[s] + page * p.out.codes_stride[s]);
        PackRow(words, row * w, w, nvalid, field, lane);
      }
    }
    __syncthreads();
  }
}

// ---- Encode: fp8 and bf16 (per-token schemes) ----------------------------------------------------------

// One warp per token row; fp8 groups of 128 channels.
template <typename T, bool kFp8>
__global__ void __launch_bounds__(kThreads) EncodeRowKernel(const EncodeParams p) {
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int page = blockIdx.y;
  const int tokens = p.shape.tokens;
  const int channels = p.shape.channels;
  if (t >= tokens) return;
  size_t base;
  const bool ok = RowBase(p.src, channels, page, t, base);
  if (!ok && lane == 0) atomicOr(&p.status->errors, kErrBadBlockId);
  const T* src = static_cast<const T*>(p.src.data);
  uint8_t* meta = p.out.meta + page * p.out.meta_stride;
  uint8_t* codes = p.out.codes[0] + page * p.out.codes_stride[0];
  const size_t row = static_cast<size_t>(t) * channels;
  auto load = [&](int c) -> float {
    if (!ok) return 0.0f;
    const float x = ToFloat<T>(src[ChannelOffset(p.src, base, c)]);
    if (!isfinite(x)) ReportNonFinite(p.status, page, tokens, channels, t, c);
    return x;
  };
  if constexpr (!kFp8) {
    uint16_t* out = reinterpret_cast<uint16_t*>(codes) + row;
    for (int c = lane; c < channels; c += 32) out[c] = FloatToBf16Sat(load(c));
  } else {
    const int groups = (channels + 127) / 128;
    for (int g = 0; g < groups; ++g) {
      float x[4];
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = g * 128 + 32 * j + lane;
        x[j] = c < channels ? load(c) : 0.0f;
        amax = RefFmax(amax, fabsf(x[j]));
      }
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
      const float scale = amax / 448.0f;
      if (lane == 0) reinterpret_cast<float*>(meta)[static_cast<size_t>(t) * groups + g] = scale;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = g * 128 + 32 * j + lane;
        if (c < channels) {
          const float y = scale > 0.0f ? x[j] / scale : 0.0f;
          codes[row + c] = FloatToE4m3(y);
        }
      }
    }
  }
}

// ---- Decode ----------------------------------------------------------------------------------------------

enum class Kind { kBf16, kUniform, kFp8, kLynx };

struct DecodeParams {
  Staging in;
  PageShape shape;
  KvGeometry dst;
  DeviceStatus* status;
  int stages;
  int stage_bits[kMaxStreams];
  int total_bits;  // of the scheme (uniform: its code width)
};

// Block (channel group of 16 * VEC, token tile of 128, page); thread (vector j, slice s) decodes channels
// [c, c + VEC) of 8 consecutive tokens.
template <typename OutT, int VEC, Kind kKind>
__global__ void __launch_bounds__(kThreads, kDecodeMinBlocks) DecodeKernel(const DecodeParams p, const __grid_constant__ LynxDeviceTables tb) {
  __shared__ float s_table[256];  // lynx: decode table; fp8: e4m3 values
  __shared__ float s_sscale[256];
  const int tid = threadIdx.x;
  if constexpr (kKind == Kind::kLynx) {
    s_table[tid] = tb.decode[tid];
    s_sscale[tid] = tb.sigma_scale[tid];
  } else if constexpr (kKind == Kind::kFp8) {
    s_table[tid] = E4m3IsNan(tid) ? 0.0f : E4m3ToFloat(tid);
  }
  __syncthreads();

  const int page = blockIdx.z;
  const int tokens = p.shape.tokens;
  const int channels = p.shape.channels;
  const int c = (blockIdx.x * kDecodeVecThreads + tid % kDecodeVecThreads) * VEC;
  const int t_first = blockIdx.y * kDecodeTileTokens + (tid / kDecodeVecThreads) * kDecodeTokensPerThread;
  if (c >= channels) return;
  const uint8_t* meta = p.in.meta + page * p.in.meta_stride;
  const size_t chunk_values = static_cast<size_t>(p.shape.num_chunks) * channels;
  OutT* dst = static_cast<OutT*>(p.dst.data);

  // Per-channel state: lynx range (lo, hi) and the current chunk's (p0, p1).
  float lo[VEC], hi[VEC], p0[VEC], p1[VEC];
  if constexpr (kKind == Kind::kLynx) {
    bool bad = false;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      lo[e] = reinterpret_cast<const float*>(meta)[c + e];
      hi[e] = reinterpret_cast<const float*>(meta)[channels + c + e];
      if (!isfinite(lo[e]) || !isfinite(hi[e]) || !(lo[e] <= hi[e])) bad = true;
    }
    if (bad) atomicOr(&p.status->errors, kErrBadChannelRange);
  }
  // Lynx and uniform, 8 channels per thread: first every stream's fields of the thread's 8 tokens (independent
  // loads, all in flight together), merged into one code prefix byte per value.
  constexpr bool kPrefetch = (kKind == Kind::kLynx || kKind == Kind::kUniform) && VEC == 8;
  unsigned long long pre[kPrefetch ? kDecodeTokensPerThread : 1];
  if constexpr (kPrefetch) {
#pragma unroll
    for (int i = 0; i < kDecodeTokensPerThread; ++i) pre[i] = 0;
    for (int s = 0; s < p.stages; ++s) {
      const int w = p.stage_bits[s];
      const uint8_t* codes = p.in.codes[s] + page * p.in.codes_stride[s];
      unsigned long long bits[kDecodeTokensPerThread];
#pragma unroll
      for (int i = 0; i < kDecodeTokensPerThread; ++i) {
        const int t = t_first + i;
        bits[i] = t < tokens ? Read8Fields(codes, static_cast<unsigned long long>(t) * channels + c, w) : 0;
      }
      const unsigned long long mask = (1ull << w) - 1;
#pragma unroll
      for (int i = 0; i < kDecodeTokensPerThread; ++i) {
        unsigned long long spread = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) spread |= ((bits[i] >> (e * w)) & mask) << (8 * e);
        pre[i] = (pre[i] << w) | spread;  // prefixes stay below 2^8: no byte overflows into the next
      }
    }
  }
  int cur_k = -1;
#pragma unroll
  for (int i = 0; i < kDecodeTokensPerThread; ++i) {
    const int t = t_first + i;
    if (t >= tokens) continue;
    const int k = t / p.shape.chunk_len;
    if (k != cur_k && (kKind == Kind::kLynx || kKind == Kind::kUniform)) {
      cur_k = k;
      const size_t mi = static_cast<size_t>(k) * channels + c;
      if constexpr (kKind == Kind::kLynx) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const Frame f = MakeFrame(lo[e], hi[e]);
          p0[e] = ChunkMu(f, meta[8 * static_cast<size_t>(channels) + mi + e]);
          p1[e] = f.half * s_sscale[meta[8 * static_cast<size_t>(channels) + chunk_values + mi + e]];
        }
      } else {
        bool bad = false;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const uint16_t m16 = reinterpret_cast<const uint16_t*>(meta)[mi + e];
          const uint16_t s16 = reinterpret_cast<const uint16_t*>(meta)[chunk_values + mi + e];
          if (((m16 >> 10) & 0x1F) == 0x1F || ((s16 >> 10) & 0x1F) == 0x1F) bad = true;
          p0[e] = F16ToFloat(m16);
          p1[e] = F16ToFloat(s16);
        }
        if (bad) atomicOr(&p.status->errors, kErrBadFp16Meta);
      }
    }
    const unsigned long long idx = static_cast<unsigned long long>(t) * channels + c;
    float y[VEC];
    if constexpr (kKind == Kind::kLynx || kKind == Kind::kUniform) {
      uint32_t prefix[VEC];
      if constexpr (kPrefetch) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) prefix[e] = static_cast<uint32_t>(pre[i] >> (8 * e)) & 0xFF;
      } else {
        prefix[0] = 0;
        for (int s = 0; s < p.stages; ++s) {
          const int w = p.stage_bits[s];
          const uint8_t* codes = p.in.codes[s] + page * p.in.codes_stride[s];
          prefix[0] = (prefix[0] << w) | ReadField(reinterpret_cast<const uint32_t*>(codes), idx, w);
        }
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        if constexpr (kKind == Kind::kLynx) {
          y[e] = Reconstruct(s_table[prefix[e]], p0[e], p1[e], lo[e], hi[e]);
        } else {
          const float prod = static_cast<float>(prefix[e]) * p1[e];
          y[e] = p0[e] + prod;
        }
      }
    } else if constexpr (kKind == Kind::kFp8) {
      const int groups = (channels + 127) / 128;
      const float scale = reinterpret_cast<const float*>(meta)[static_cast<size_t>(t) * groups + c / 128];
      bool bad = !isfinite(scale) || !(scale >= 0.0f) || !isfinite(scale * 448.0f);
      if (bad) atomicOr(&p.status->errors, kErrBadFp8Scale);
      const uint8_t* codes = p.in.codes[0] + page * p.in.codes_stride[0];
      bool nan_code = false;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const uint32_t code = codes[idx + e];
        nan_code |= E4m3IsNan(code);
        y[e] = s_table[code] * scale;
      }
      if (nan_code) atomicOr(&p.status->errors, kErrNonFiniteCode);
    } else {
      const uint16_t* codes = reinterpret_cast<const uint16_t*>(p.in.codes[0] + page * p.in.codes_stride[0]);
      bool bad = false;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const uint16_t b = codes[idx + e];
        bad |= (b & 0x7F80) == 0x7F80;
        y[e] = __uint_as_float(static_cast<uint32_t>(b) << 16);
      }
      if (bad) atomicOr(&p.status->errors, kErrNonFiniteCode);
    }
    size_t base;
    if (!RowBase(p.dst, channels, page, t, base)) {
      atomicOr(&p.status->errors, kErrBadBlockId);
      continue;
    }
    if constexpr (VEC == 1) {
      dst[ChannelOffset(p.dst, base, c)] = FromFloat<OutT>(y[0]);
    } else {
      StoreVec<OutT, VEC>(dst + ChannelOffset(p.dst, base, c), y);
    }
  }
}

// ---- Launch plumbing -------------------------------------------------------------------------------------

absl::Status LaunchError(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat("launch of ", kernel, ": ", cudaGetErrorName(e), " (",
                                       cudaGetErrorString(e), ")");
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T, int VEC, bool kLynx>
absl::Status LaunchGroupEncode(const EncodeParams& p, const LynxDeviceTables& tb, cudaStream_t stream) {
  const dim3 grid((p.shape.channels + kGroup - 1) / kGroup, p.shape.num_pages);
  if (p.shape.tokens <= kMaxStagedTokens) {
    const size_t smem = static_cast<size_t>(p.shape.tokens) * kGroup * sizeof(float);
    EncodeGroupKernel<T, VEC, kLynx, true><<<grid, kThreads, smem, stream>>>(p, tb);
  } else {
    EncodeGroupKernel<T, VEC, kLynx, false><<<grid, kThreads, 0, stream>>>(p, tb);
  }
  return LaunchError(kLynx ? "EncodeGroupKernel<lynx>" : "EncodeGroupKernel<uniform>");
}

template <typename T>
absl::Status LaunchEncodeTyped(SchemeKind kind, const EncodeParams& p, const LynxDeviceTables& tb,
                               cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = p.src.head_dim % kVec == 0 && Aligned16(p.src.data);
  switch (kind) {
    case SchemeKind::kBf16:
    case SchemeKind::kFp8: {
      const dim3 grid((p.shape.tokens + kThreads / 32 - 1) / (kThreads / 32), p.shape.num_pages);
      if (kind == SchemeKind::kBf16) {
        EncodeRowKernel<T, false><<<grid, kThreads, 0, stream>>>(p);
      } else {
        EncodeRowKernel<T, true><<<grid, kThreads, 0, stream>>>(p);
      }
      return LaunchError("EncodeRowKernel");
    }
    case SchemeKind::kInt8:
    case SchemeKind::kInt4:
      return vec ? LaunchGroupEncode<T, kVec, false>(p, tb, stream) : LaunchGroupEncode<T, 1, false>(p, tb, stream);
    case SchemeKind::kLynx:
      return vec ? LaunchGroupEncode<T, kVec, true>(p, tb, stream) : LaunchGroupEncode<T, 1, true>(p, tb, stream);
  }
  return absl::InternalError("unknown scheme kind");
}

template <typename OutT, Kind kKind>
absl::Status LaunchDecodeKind(const DecodeParams& p, const LynxDeviceTables& tb, cudaStream_t stream) {
  const bool vec = p.shape.channels % 8 == 0 && p.dst.head_dim % 8 == 0 && Aligned16(p.dst.data);
  const dim3 tiles(0, (p.shape.tokens + kDecodeTileTokens - 1) / kDecodeTileTokens, p.shape.num_pages);
  if (vec) {
    const dim3 grid((p.shape.channels + 8 * kDecodeVecThreads - 1) / (8 * kDecodeVecThreads), tiles.y, tiles.z);
    DecodeKernel<OutT, 8, kKind><<<grid, kThreads, 0, stream>>>(p, tb);
  } else {
    const dim3 grid((p.shape.channels + kDecodeVecThreads - 1) / kDecodeVecThreads, tiles.y, tiles.z);
    DecodeKernel<OutT, 1, kKind><<<grid, kThreads, 0, stream>>>(p, tb);
  }
  return LaunchError("DecodeKernel");
}

template <typename OutT>
absl::Status LaunchDecodeTyped(SchemeKind kind, const DecodeParams& p, const LynxDeviceTables& tb,
                               cudaStream_t stream) {
  switch (kind) {
    case SchemeKind::kBf16:
      return LaunchDecodeKind<OutT, Kind::kBf16>(p, tb, stream);
    case SchemeKind::kInt8:
    case SchemeKind::kInt4:
      return LaunchDecodeKind<OutT, Kind::kUniform>(p, tb, stream);
    case SchemeKind::kFp8:
      return LaunchDecodeKind<OutT, Kind::kFp8>(p, tb, stream);
    case SchemeKind::kLynx:
      return LaunchDecodeKind<OutT, Kind::kLynx>(p, tb, stream);
  }
  return absl::InternalError("unknown scheme kind");
}

}  // namespace

absl::Status LaunchEncode(const Scheme& scheme, bool centering_mean, const LynxDeviceTables* tables,
                          const KvGeometry& src, const PageShape& shape, const Staging& out, DeviceStatus* status,
                          void* stream_handle) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  EncodeParams p;
  p.src = src;
  p.shape = shape;
  p.out = out;
  p.status = status;
  p.num_streams = scheme.num_streams();
  p.total_bits = 0;
  for (int i = 0; i < kMaxStreams; ++i) p.stage_bits[i] = i < p.num_streams ? scheme.stage_bits[i] : 0;
  for (int i = 0; i < p.num_streams; ++i) p.total_bits += scheme.stage_bits[i];
  p.centering_mean = centering_mean;
  // Streams whose rows do not start on 32-bit words share boundary words between groups: zero them first.
  if (scheme.kind == SchemeKind::kLynx || scheme.kind == SchemeKind::kInt8 || scheme.kind == SchemeKind::kInt4) {
    for (int i = 0; i < p.num_streams; ++i) {
      if ((static_cast<size_t>(shape.channels) * p.stage_bits[i]) % 32 != 0) {
        const cudaError_t e = cudaMemsetAsync(out.codes[i], 0, out.codes_stride[i] * shape.num_pages, stream);
        if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaMemsetAsync: ", cudaGetErrorName(e)));
      }
    }
  }
  static const LynxDeviceTables kNoTables{};
  const LynxDeviceTables& tb = tables != nullptr ? *tables : kNoTables;
  switch (src.dtype) {
    case DType::kFloat32:
      return LaunchEncodeTyped<float>(scheme.kind, p, tb, stream);
    case DType::kBfloat16:
      return LaunchEncodeTyped<__nv_bfloat16>(scheme.kind, p, tb, stream);
    case DType::kFloat16:
      return LaunchEncodeTyped<__half>(scheme.kind, p, tb, stream);
  }
  return absl::InternalError("unknown dtype");
}

absl::Status LaunchDecode(const Scheme& scheme, int stages, const LynxDeviceTables* tables, const Staging& in,
                          const PageShape& shape, const KvGeometry& dst, DeviceStatus* status, void* stream_handle) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  DecodeParams p;
  p.in = in;
  p.shape = shape;
  p.dst = dst;
  p.status = status;
  p.stages = stages;
  p.total_bits = 0;
  for (int i = 0; i < kMaxStreams; ++i) p.stage_bits[i] = i < scheme.num_streams() ? scheme.stage_bits[i] : 0;
  for (int i = 0; i < scheme.num_streams(); ++i) p.total_bits += scheme.stage_bits[i];
  static const LynxDeviceTables kNoTables{};
  const LynxDeviceTables& tb = tables != nullptr ? *tables : kNoTables;
  switch (dst.dtype) {
    case DType::kFloat32:
      return LaunchDecodeTyped<float>(scheme.kind, p, tb, stream);
    case DType::kBfloat16:
      return LaunchDecodeTyped<__nv_bfloat16>(scheme.kind, p, tb, stream);
    case DType::kFloat16:
      return LaunchDecodeTyped<__half>(scheme.kind, p, tb, stream);
  }
  return absl::InternalError("unknown dtype");
}

}  // namespace kvt::codec::gpu::internal
