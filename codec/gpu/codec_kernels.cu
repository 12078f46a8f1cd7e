// CUDA kernels of every codec scheme (codec_kernels.h). Each kernel performs, per value, exactly the float
// operations of the scalar reference (codec/internal/lynx_math.h, lynx_kernels_ref.cc, baselines.cc,
// float_formats.cc) in the same order; this file is compiled with --fmad=false so nothing is contracted.
// Minima, maxima and clamps use the reference's own compare-and-select forms (the sign of a zero can reach the
// int8/int4 metadata); the fp8 group maximum, std::fmax in the reference, is RefFmax (glibc: first operand on
// ties).
//
// Encode (lynx, int8, int4): one block per (page, group of 32 channels). The page's tile of that group is
// loaded once with 16-byte loads into shared memory (pages up to 256 tokens; longer pages are read from
// global memory twice), per-channel range and per-chunk statistics are computed by one thread per
// (chunk, channel), then each thread codes 8 consecutive channels of a row, whose fields fill whole bytes of
// every stream (one store per stream). With channels % 8 != 0 a warp codes a row (a lane per channel) and packs
// the fields with shuffles into 32-bit words (atomicOr only on words shared with a neighbouring group).
// The magnitude code comes from lynx_math.h's bucket table (one threshold compare) or, for tables that need more
// corrections, a log guess corrected against the thresholds; the tables are read from device memory.
// Decode: one block per (page, 128 channels, 128 tokens); the block derives each chunk's (mu, sigma) once into
// shared memory, then a thread decodes 8 channels of 8 consecutive tokens, reading each stream's fields with
// one aligned load per token and writing the output dtype with 16-byte stores.
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
constexpr int kDecodeMinBlocks = 4;  // caps registers at 64 so four 256-thread blocks share an SM
constexpr int kDecodeMaxTileChunks = 9;  // chunks a 128-token tile spans when chunks have >= 16 tokens
constexpr unsigned kFull = 0xffffffffu;

// ---- The reference's float semantics -------------------------------------------------------------------

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
// The chunk end grid (lynx_math.h ChunkEnd ... EndPairFromIndex), operation for operation.
constexpr int kEndGridMax = 4094;
constexpr unsigned kMaxEndPairIndex = 4094u * 4095u / 2u + 4094u;
constexpr int kEndPairBits = 23;
constexpr int kAnchorSampleStride = 4;  // the anchor tables count tokens t % 4 == 0 (lynx_math.h)
__device__ __forceinline__ float ChunkEnd(const Frame& f, int q) {
  if (q <= 0) return f.lo;
  if (q >= kEndGridMax) return f.hi;
  const float off = (static_cast<float>(q) - 2047.0f) / 2047.0f;
  const float prod = f.half * off;
  return Clamp(f.centre + prod, f.lo, f.hi);
}
__device__ __forceinline__ int GuessEnd(const Frame& f, float a) {  // a starting point only
  const float u = Clamp((a - f.centre) / f.half, -1.0f, 1.0f);
  const int g = static_cast<int>(floorf(u * 2047.0f + 2047.0f));
  return g < 0 ? 0 : (g > kEndGridMax ? kEndGridMax : g);
}
__device__ __forceinline__ int QuantizeEndBelow(const Frame& f, float a) {
  if (f.half == 0.0f) return 0;
  int q = GuessEnd(f, a);
  while (q > 0 && ChunkEnd(f, q) > a) --q;
  while (q < kEndGridMax && ChunkEnd(f, q + 1) <= a) ++q;
  return q;
}
__device__ __forceinline__ int QuantizeEndAbove(const Frame& f, float b, int q_low) {
  if (f.half == 0.0f) return 0;
  int q = GuessEnd(f, b);
  if (q < q_low) q = q_low;
  while (q > q_low && ChunkEnd(f, q - 1) >= b) --q;
  while (q < kEndGridMax && ChunkEnd(f, q) < b) ++q;
  return q;
}
__device__ __forceinline__ void QuantizeChunkEnds(const Frame& f, bool centering_mean, float cmin, float cmax,
                                                  float m, int& q_low, int& q_high) {
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
__device__ __forceinline__ void ChunkCentreAndWidth(const Frame& f, int q_low, int q_high, float& mu, float& sigma) {
  const float a = ChunkEnd(f, q_low);
  const float b = ChunkEnd(f, q_high);
  const float ha = 0.5f * a;
  const float hb = 0.5f * b;
  const float m = Clamp(ha + hb, a, b);
  const float up = b - m;
  const float down = m - a;
  const float sg = up > down ? up : down;
  mu = m;
  sigma = sg < 3.40282347e+38f ? sg : 3.40282347e+38f;
}
__device__ __forceinline__ bool EndPairFromIndex(unsigned index, int& q_low, int& q_high) {
  if (index > kMaxEndPairIndex) return false;
  long long h = static_cast<long long>((sqrt(8.0 * index + 1.0) - 1.0) / 2.0);
  while (h > 0 && h * (h + 1) / 2 > index) --h;
  while ((h + 1) * (h + 2) / 2 <= index) ++h;
  q_high = static_cast<int>(h);
  q_low = static_cast<int>(index - h * (h + 1) / 2);
  return true;
}
// The 23-bit end pair index of chunk-channel i from the packed field array (LSB-first; the staging leaves room
// past the array for the 4-byte read).
__device__ __forceinline__ unsigned ReadEndPair(const uint8_t* ends, size_t i) {
  const size_t bit = i * kEndPairBits;
  const uint8_t* q = ends + bit / 8;
  const unsigned v = q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<unsigned>(q[3]) << 24);
  return (v >> (bit % 8)) & ((1u << kEndPairBits) - 1);
}
// mu and sigma of chunk-channel i from its stored end pair; false (and mu = lo, sigma = 0) for a bad index.
__device__ __forceinline__ bool DecodeChunk(const uint8_t* ends, size_t i, const Frame& f, float& mu, float& sigma) {
  int ql, qh;
  const bool ok = EndPairFromIndex(ReadEndPair(ends, i), ql, qh);
  if (!ok) ql = qh = 0;
  ChunkCentreAndWidth(f, ql, qh, mu, sigma);
  return ok;
}
__device__ __forceinline__ float InverseSigma(float sigma) {
  if (!(sigma > 0.0f)) return 0.0f;
  float inv = 1.0f / sigma;
  return inv < 3.40282347e+38f ? inv : 3.40282347e+38f;
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

// The code of one value: lynx (a0 = mu, a1 = 1 / sigma) or uniform (a0 = min, a1 = scale).
struct LynxScalars {
  float alpha, inv_log1p_alpha;
  int bits, max_code, bucket_count, corrections;
};

template <bool kLynx>
__device__ __forceinline__ uint32_t CodeOf(float x, float a0, float a1, const float* thr, const uint8_t* bucket_base,
                                           const LynxScalars& tb, float qmax) {
  if constexpr (kLynx) {
    float xf = 0.0f;
    if (a1 != 0.0f) {
      const float d = x - a0;
      xf = Clamp(d * a1, -1.0f, 1.0f);
    }
    const uint32_t neg = xf < 0.0f ? 1u : 0u;
    const float a = fabsf(xf);
    const int m = tb.max_code;
    int mag;
    if (tb.bucket_count > 0) {
      // lynx_math.h's bucket path: j = (int)(a * bucket_count) (exact, a power of two), then the thresholds
      // inside bucket j.
      const int j = __float2int_rz(a * static_cast<float>(tb.bucket_count));
      const int base = bucket_base[j];
      mag = base + (a >= thr[base + 1] ? 1 : 0);  // the host enables this path only with one correction
    } else {
      // A guess of #{k : a >= t_k} from the log curve, corrected by the thresholds themselves: exact for any
      // guess, as t_k is non-decreasing.
      mag = __float2int_rn(__logf(1.0f + tb.alpha * a) * tb.inv_log1p_alpha * static_cast<float>(m));
      mag = mag < 0 ? 0 : (mag > m ? m : mag);
      while (mag > 0 && a < thr[mag]) --mag;
      while (mag < m && a >= thr[mag + 1]) ++mag;
    }
    return (neg << (tb.bits - 1)) | static_cast<uint32_t>(mag);
  } else {
    float q = rintf((x - a0) / a1);
    q = q > 0.0f ? q : 0.0f;
    q = q < qmax ? q : qmax;
    return a1 > 0.0f ? static_cast<uint32_t>(q) : 0u;  // scale 0: a flat chunk, every code 0
  }
}

// Stores the low 8 * w bits of v at p (aligned to w bytes when w is a power of two).
__device__ __forceinline__ void StoreFields(uint8_t* p, unsigned long long v, int w) {
  switch (w) {
    case 1:
      *p = static_cast<uint8_t>(v);
      return;
    case 2:
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
      return;
    case 4:
      *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
      return;
    case 8:
      *reinterpret_cast<unsigned long long*>(p) = v;
      return;
    default:
      for (int b = 0; b < w; ++b) p[b] = static_cast<uint8_t>(v >> (8 * b));
  }
}

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

template <typename T, int VEC, bool kLynx, bool kStaged, bool kOctets>
__global__ void __launch_bounds__(kThreads)
    EncodeGroupKernel(const EncodeParams p, const LynxDeviceTables* __restrict__ tables) {
  extern __shared__ __align__(16) float tile[];  // [tokens][kGroup] when kStaged
  __shared__ float s_thr[128 + kMaxDeviceCorrections];
  __shared__ __align__(16) uint8_t s_bucket[kLynx ? kMaxDeviceBuckets + 16 : 16];
  __shared__ unsigned s_hist[256];  // multi-stream lynx: this block's code counts
  __shared__ Frame s_frame[kGroup];
  __shared__ float s_red_lo[kRounds][kGroup];
  __shared__ float s_red_hi[kRounds][kGroup];
  __shared__ __align__(16) float s_p0[kRounds][kGroup];  // lynx: mu; uniform: min
  __shared__ __align__(16) float s_p1[kRounds][kGroup];  // lynx: 1 / sigma (InverseSigma); uniform: scale

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int page = blockIdx.y;
  const int c0 = blockIdx.x * kGroup;
  const int tokens = p.shape.tokens;
  const int channels = p.shape.channels;
  const int nvalid = min(kGroup, channels - c0);
  const T* src = static_cast<const T*>(p.src.data);

  // The tables come from device memory (coalesced); read through kernel parameters with per-thread indices
  // they would be serialized by the constant cache.
  LynxScalars tb{};
  if constexpr (kLynx) {
    tb = LynxScalars{tables->alpha, tables->inv_log1p_alpha, tables->bits, tables->max_code, tables->bucket_count,
                     tables->corrections};
    if (tid < 128 + kMaxDeviceCorrections) s_thr[tid] = tables->thresholds[tid];
    s_hist[tid] = 0;
    for (int j = tid; j <= tb.bucket_count; j += kThreads) s_bucket[j] = tables->bucket_base[j];
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
    // Row offsets first (one block-id lookup and division per token), then the tile: thread tid always loads
    // the same VEC channels, of rows tid / kPerRow + u * kRowsPerPass, so no division per vector.
    __shared__ long long s_row[kMaxStagedTokens];  // element offset of the row, or -1 for a bad block id
    for (int t = tid; t < tokens; t += kThreads) {
      size_t base;
      s_row[t] = RowBase(p.src, channels, page, t, base) ? static_cast<long long>(base) : -1;
    }
    __syncthreads();
    constexpr int kPerRow = kGroup / VEC;
    constexpr int kRowsPerPass = kThreads / kPerRow;
    const int j = tid % kPerRow;
    const bool active = j * VEC < nvalid;
    const size_t coff = ChannelOffset(p.src, 0, c0 + j * VEC);
    constexpr int kBatch = 4;
    for (int t0 = tid / kPerRow; t0 < tokens; t0 += kRowsPerPass * kBatch) {
      float v[kBatch][VEC];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int t = t0 + u * kRowsPerPass;
        const long long base = active && t < tokens ? s_row[t] : -2;
        if (base >= 0) {
          LoadVec<T, VEC>(src + static_cast<size_t>(base) + coff, v[u]);
        } else {
          if (base == -1) atomicOr(&p.status->errors, kErrBadBlockId);
#pragma unroll
          for (int e = 0; e < VEC; ++e) v[u][e] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int t = t0 + u * kRowsPerPass;
        if (active && t < tokens) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) tile[t * kGroup + j * VEC + e] = v[u][e];
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

  const int chunk_len = p.shape.chunk_len;
  const int num_chunks = p.shape.num_chunks;
  const float qmax = static_cast<float>((1 << p.total_bits) - 1);
  // Min and max of chunk k of channel c0 + c (the reference's compare order), checking every value is finite.
  auto chunk_range = [&](int k, int c, float& cmin, float& cmax) {
    const int t0 = k * chunk_len;
    cmin = __int_as_float(0x7f800000);
    cmax = -cmin;
    for (int t = 0; t < chunk_len; ++t) {
      const float x = value(t0 + t, c);
      if (!isfinite(x)) ReportNonFinite(p.status, page, tokens, channels, t0 + t, c0 + c);
      if constexpr (kLynx) {
        if (x < cmin) cmin = x;
        if (x > cmax) cmax = x;
      } else {  // baselines.cc EncodeUniform: the second operand on ties
        cmin = cmin < x ? cmin : x;
        cmax = cmax > x ? cmax : x;
      }
    }
  };
  // Lynx: the page-channel range first (lynx_kernels_ref.cc RefStatsRange). When the page has at most kRounds
  // chunks, each thread's chunk range is computed once and the channel range is their min/max (equal up to the
  // sign of a zero, which is canonicalized); else a separate pass over the tokens.
  const bool fused = kLynx && num_chunks <= kRounds;
  float f_cmin = 0.0f, f_cmax = 0.0f;
  if constexpr (kLynx) {
    const int c = tid % kGroup;
    const int s = tid / kGroup;
    float lo = __int_as_float(0x7f800000);
    float hi = -lo;
    if (fused) {
      if (s < num_chunks && c < nvalid) {
        chunk_range(s, c, f_cmin, f_cmax);
        lo = f_cmin;
        hi = f_cmax;
      }
    } else if (c < nvalid) {
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

  for (int k0 = 0; k0 < num_chunks; k0 += kRounds) {
    {
      const int kl = tid / kGroup;
      const int c = tid % kGroup;
      const int k = k0 + kl;
      if (k < num_chunks && c < nvalid) {
        const int t0 = k * chunk_len;
        const size_t i = static_cast<size_t>(k) * channels + c0 + c;
        float cmin, cmax;
        if (fused) {
          cmin = f_cmin;
          cmax = f_cmax;
        } else {
          chunk_range(k, c, cmin, cmax);
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
          int ql, qh;
          QuantizeChunkEnds(f, p.centering_mean, cmin, cmax, centre, ql, qh);
          float mu, sigma;
          ChunkCentreAndWidth(f, ql, qh, mu, sigma);
          // The 23-bit field of chunk-channel i, ORed into the zeroed 32-bit words it spans (shared with the
          // neighbouring fields, some written by other blocks).
          const unsigned index = static_cast<unsigned>(qh) * static_cast<unsigned>(qh + 1) / 2 + static_cast<unsigned>(ql);
          const size_t bit = i * kEndPairBits;
          unsigned* words = reinterpret_cast<unsigned*>(meta + p.out.ends_offset) + bit / 32;
          const unsigned long long v = static_cast<unsigned long long>(index) << (bit % 32);
          atomicOr(&words[0], static_cast<unsigned>(v));
          if (v >> 32) atomicOr(&words[1], static_cast<unsigned>(v >> 32));
          s_p0[kl][c] = mu;
          s_p1[kl][c] = InverseSigma(sigma);
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
    if constexpr (kOctets) {
      // A thread codes 8 consecutive channels of one row: their fields fill whole bytes of every stream.
      constexpr int kPerRow = kGroup / 8;
      const int c = 8 * (tid % kPerRow);
      if (c < nvalid) {
        const float inv_chunk = 1.0f / static_cast<float>(chunk_len);
        for (int t = t_begin + tid / kPerRow; t < t_end; t += kThreads / kPerRow) {
          // (t - t_begin) / chunk_len: exact, as t - t_begin < 2048 leaves a margin of 0.5 / chunk_len.
          const int kl = __float2int_rz((static_cast<float>(t - t_begin) + 0.5f) * inv_chunk);
          float x[8], a0[8], a1[8];
          if constexpr (kStaged) {
            const float4* tp = reinterpret_cast<const float4*>(&tile[t * kGroup + c]);
            const float4 u = tp[0], v = tp[1];
            x[0] = u.x, x[1] = u.y, x[2] = u.z, x[3] = u.w, x[4] = v.x, x[5] = v.y, x[6] = v.z, x[7] = v.w;
          } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) x[e] = value(t, c + e);
          }
          const float4* p0 = reinterpret_cast<const float4*>(&s_p0[kl][c]);
          const float4* p1 = reinterpret_cast<const float4*>(&s_p1[kl][c]);
          const float4 m0 = p0[0], m1 = p0[1], s0 = p1[0], s1 = p1[1];
          a0[0] = m0.x, a0[1] = m0.y, a0[2] = m0.z, a0[3] = m0.w, a0[4] = m1.x, a0[5] = m1.y, a0[6] = m1.z, a0[7] = m1.w;
          a1[0] = s0.x, a1[1] = s0.y, a1[2] = s0.z, a1[3] = s0.w, a1[4] = s1.x, a1[5] = s1.y, a1[6] = s1.z, a1[7] = s1.w;
          uint32_t code[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) code[e] = CodeOf<kLynx>(x[e], a0[e], a1[e], s_thr, s_bucket, tb, qmax);
          if (kLynx && p.out.histogram != nullptr && t % kAnchorSampleStride == 0) {
#pragma unroll
            for (int e = 0; e < 8; ++e) atomicAdd(&s_hist[code[e]], 1u);
          }
          // The 8 codes as bytes; each stream's field of every byte, gathered into 8 * w contiguous bits.
          const uint32_t lo4 = code[0] | (code[1] << 8) | (code[2] << 16) | (code[3] << 24);
          const uint32_t hi4 = code[4] | (code[5] << 8) | (code[6] << 16) | (code[7] << 24);
          int shift = p.total_bits;
          const unsigned long long octet = (static_cast<unsigned long long>(t) * channels + c0 + c) >> 3;
          for (int s = 0; s < p.num_streams; ++s) {
            const int w = p.stage_bits[s];
            shift -= w;
            const uint32_t mask = (1u << w) - 1;
            unsigned long long packed;
            if (w == 8) {
              packed = lo4 | (static_cast<unsigned long long>(hi4) << 32);
            } else if (w == 4) {
              const uint32_t f_lo = (lo4 >> shift) & 0x0F0F0F0Fu, f_hi = (hi4 >> shift) & 0x0F0F0F0Fu;
              packed = __byte_perm(f_lo, f_hi, 0x6420) | (__byte_perm(f_lo, f_hi, 0x7531) << 4);
            } else if (w < 4) {
              uint32_t acc = 0;
#pragma unroll
              for (int e = 0; e < 8; ++e) acc |= ((code[e] >> shift) & mask) << (e * w);
              packed = acc;
            } else {
              packed = 0;
#pragma unroll
              for (int e = 0; e < 8; ++e) packed |= static_cast<unsigned long long>((code[e] >> shift) & mask) << (e * w);
            }
            StoreFields(p.out.codes[s] + page * p.out.codes_stride[s] + octet * w, packed, w);
          }
        }
      }
    } else {
      for (int t = t_begin + warp; t < t_end; t += kThreads / 32) {
        const int kl = (t - t_begin) / chunk_len;
        uint32_t code = 0;
        if (lane < nvalid) code = CodeOf<kLynx>(value(t, lane), s_p0[kl][lane], s_p1[kl][lane], s_thr, s_bucket, tb, qmax);
        if (kLynx && p.out.histogram != nullptr && lane < nvalid && t % kAnchorSampleStride == 0) {
          atomicAdd(&s_hist[code], 1u);
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
    }
    __syncthreads();
  }
  if constexpr (kLynx) {
    if (p.out.histogram != nullptr && s_hist[tid] != 0) atomicAdd(&p.out.histogram[page * 256 + tid], s_hist[tid]);
  }
}

// Multi-stream lynx: the page's conditional-mean anchor tables from its code histogram (lynx_math.cc
// ConditionalMeanTable): thread j computes entry j with the CPU's double operations in the CPU's order. One block
// per page.
__global__ void __launch_bounds__(128) AnchorTableKernel(const EncodeParams p, const LynxDeviceTables* __restrict__ tables) {
  const int page = blockIdx.x;
  const int j = threadIdx.x;
  if (j >= p.out.table_floats) return;
  // The stage and cell of entry j: the partial stages' tables are concatenated, 2^(known - 1) entries each.
  int known = 0, first = 0;
  for (int s = 0; s + 1 < p.num_streams; ++s) {
    known += p.stage_bits[s];
    if (j < first + (1 << (known - 1))) break;
    first += 1 << (known - 1);
  }
  const int h = j - first;
  const int unknown = p.total_bits - known;
  const int sign = 1 << (p.total_bits - 1);
  const uint32_t* hist = p.out.histogram + static_cast<size_t>(page) * 256;
  double sum = 0.0;
  unsigned long long n = 0;
  for (int i = h << unknown; i < (h + 1) << unknown; ++i) {
    const unsigned long long c = static_cast<unsigned long long>(hist[i]) + hist[i | sign];
    sum += static_cast<double>(c) * static_cast<double>(tables->full_values[i]);
    n += c;
  }
  const float v = n == 0 ? tables->anchor_fallback[j] : static_cast<float>(sum / static_cast<double>(n));
  uint8_t* dst = p.out.meta + page * p.out.meta_stride + p.out.tables_offset + 4 * static_cast<size_t>(j);
  const unsigned bits = __float_as_uint(v);
#pragma unroll
  for (int b = 0; b < 4; ++b) dst[b] = static_cast<uint8_t>(bits >> (8 * b));
}

__device__ __forceinline__ float ReadF32(const uint8_t* q) {
  return __uint_as_float(q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<unsigned>(q[3]) << 24));
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

// VEC consecutive floats of shared memory (16-byte aligned when VEC == 8).
template <int VEC>
__device__ __forceinline__ void LoadShared(const float* p, float* out) {
  if constexpr (VEC == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] = p[e];
  }
}

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
template <typename OutT, int VEC, Kind kKind, bool kSharedParams>
__global__ void __launch_bounds__(kThreads, kDecodeMinBlocks) DecodeKernel(const DecodeParams p, const LynxDeviceTables* __restrict__ tables) {
  constexpr int kGroupChannels = kDecodeVecThreads * VEC;
  constexpr bool kChunked = kKind == Kind::kLynx || kKind == Kind::kUniform;
  __shared__ float s_table[256];  // lynx: decode table; fp8: e4m3 values
  // The tile's chunk parameters, computed once per (chunk, channel) by the block: lynx (mu, sigma),
  // uniform (min, scale). Used when the tile spans at most kDecodeMaxTileChunks chunks.
  __shared__ __align__(16) float s_p0[kChunked ? kDecodeMaxTileChunks : 1][kGroupChannels];
  __shared__ __align__(16) float s_p1[kChunked ? kDecodeMaxTileChunks : 1][kGroupChannels];
  __shared__ __align__(16) float s_lo[kKind == Kind::kLynx ? kGroupChannels : 1];
  __shared__ __align__(16) float s_hi[kKind == Kind::kLynx ? kGroupChannels : 1];
  const int tid = threadIdx.x;
  if constexpr (kKind == Kind::kLynx) {
    // The page's anchor tables, every entry checked (as the CPU decoder does); the decode table is the stored
    // one of this stage (upper half negated) or the fixed rule's.
    const uint8_t* stored = p.in.meta + blockIdx.z * p.in.meta_stride + p.in.tables_offset;
    if (tid < p.in.table_floats) {
      const float v = ReadF32(stored + 4 * tid);
      if (!(v >= 0.0f && v <= 1.0f)) atomicOr(&p.status->errors, kErrBadAnchorTable);
    }
    if (tables->decode_from_page) {
      int known = 0;
      for (int s = 0; s < p.stages; ++s) known += p.stage_bits[s];
      const int half = 1 << (known - 1);
      if (tid < 2 * half) {
        const float m = ReadF32(stored + 4 * (tables->table_first + (tid & (half - 1))));
        s_table[tid] = tid < half ? m : -m;
      }
    } else {
      s_table[tid] = tables->decode[tid];
    }
  } else if constexpr (kKind == Kind::kFp8) {
    s_table[tid] = E4m3IsNan(tid) ? 0.0f : E4m3ToFloat(tid);
  }
  __syncthreads();

  const int page = blockIdx.z;
  const int tokens = p.shape.tokens;
  const int channels = p.shape.channels;
  const int cg0 = blockIdx.x * kGroupChannels;
  const int c = cg0 + (tid % kDecodeVecThreads) * VEC;
  const int t_tile = blockIdx.y * kDecodeTileTokens;
  const int t_first = t_tile + (tid / kDecodeVecThreads) * kDecodeTokensPerThread;
  const uint8_t* meta = p.in.meta + page * p.in.meta_stride;
  const size_t chunk_values = static_cast<size_t>(p.shape.num_chunks) * channels;
  OutT* dst = static_cast<OutT*>(p.dst.data);
  const int k_first = t_tile / p.shape.chunk_len;
  const int tile_chunks = (min(t_tile + kDecodeTileTokens, tokens) - 1) / p.shape.chunk_len - k_first + 1;
  // The launcher picks kSharedParams only when every tile spans at most kDecodeMaxTileChunks chunks.
  constexpr bool shared_params = kChunked && kSharedParams;
  if constexpr (shared_params) {
    for (int idx = tid; idx < tile_chunks * kGroupChannels; idx += kThreads) {
      const int kk = idx / kGroupChannels;
      const int cc = idx - kk * kGroupChannels;
      const int ca = cg0 + cc;
      if (ca >= channels) continue;
      const size_t mi = static_cast<size_t>(k_first + kk) * channels + ca;
      if constexpr (kKind == Kind::kLynx) {
        const float l = reinterpret_cast<const float*>(meta)[ca];
        const float h = reinterpret_cast<const float*>(meta)[channels + ca];
        if (kk == 0) {
          if (!isfinite(l) || !isfinite(h) || !(l <= h)) atomicOr(&p.status->errors, kErrBadChannelRange);
          s_lo[cc] = l;
          s_hi[cc] = h;
        }
        const Frame f = MakeFrame(l, h);
        float mu, sigma;
        if (!DecodeChunk(meta + p.in.ends_offset, mi, f, mu, sigma)) atomicOr(&p.status->errors, kErrBadChunkEnds);
        s_p0[kk][cc] = mu;
        s_p1[kk][cc] = sigma;
      } else if constexpr (kKind == Kind::kUniform) {
        const uint16_t m16 = reinterpret_cast<const uint16_t*>(meta)[mi];
        const uint16_t s16 = reinterpret_cast<const uint16_t*>(meta)[chunk_values + mi];
        if (((m16 >> 10) & 0x1F) == 0x1F || ((s16 >> 10) & 0x1F) == 0x1F) atomicOr(&p.status->errors, kErrBadFp16Meta);
        s_p0[kk][cc] = F16ToFloat(m16);
        s_p1[kk][cc] = F16ToFloat(s16);
      }
    }
  }
  __syncthreads();
  if (c >= channels) return;

  // Per token: the lynx range (lo, hi) and the chunk's (p0, p1) of the thread's channels.
  float lo[VEC], hi[VEC], p0[VEC], p1[VEC];
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
        unsigned long long spread;
        if (w == 8) {
          spread = bits[i];
        } else if (w == 4) {  // nibbles 0..7 to bytes 0..7
          const uint32_t x = static_cast<uint32_t>(bits[i]);
          const uint32_t even = x & 0x0F0F0F0Fu, odd = (x >> 4) & 0x0F0F0F0Fu;
          spread = __byte_perm(even, odd, 0x5140) | (static_cast<unsigned long long>(__byte_perm(even, odd, 0x7362)) << 32);
        } else {
          spread = 0;
#pragma unroll
          for (int e = 0; e < 8; ++e) spread |= ((bits[i] >> (e * w)) & mask) << (8 * e);
        }
        pre[i] = (pre[i] << w) | spread;  // prefixes stay below 2^8: no byte overflows into the next
      }
    }
  }
  // Cursors over the thread's consecutive tokens: chunk and block advance without a division per token.
  int kc = t_first / p.shape.chunk_len, kr = t_first - kc * p.shape.chunk_len;
  int bj = t_first / p.dst.block_tokens, br = t_first - bj * p.dst.block_tokens;
  const int32_t* page_ids = p.dst.block_ids + static_cast<size_t>(page) * p.dst.blocks_per_page;
  const size_t coff = ChannelOffset(p.dst, 0, c);
#pragma unroll
  for (int i = 0; i < kDecodeTokensPerThread; ++i) {
    const int t = t_first + i;
    if (t >= tokens) continue;
    const int k = kc;
    const int row_block = bj, row = br;
    if (++kr == p.shape.chunk_len) kr = 0, ++kc;
    if (++br == p.dst.block_tokens) br = 0, ++bj;
    if constexpr (shared_params) {
      const int kk = k - k_first;
      LoadShared<VEC>(&s_p0[kk][c - cg0], p0);
      LoadShared<VEC>(&s_p1[kk][c - cg0], p1);
      if constexpr (kKind == Kind::kLynx) {
        LoadShared<VEC>(&s_lo[c - cg0], lo);
        LoadShared<VEC>(&s_hi[c - cg0], hi);
      }
    } else if constexpr (kChunked) {  // chunks shorter than 16 tokens: each thread derives its own parameters
      const size_t mi = static_cast<size_t>(k) * channels + c;
      if constexpr (kKind == Kind::kLynx) {
        bool bad = false, bad_ends = false;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          lo[e] = reinterpret_cast<const float*>(meta)[c + e];
          hi[e] = reinterpret_cast<const float*>(meta)[channels + c + e];
          if (!isfinite(lo[e]) || !isfinite(hi[e]) || !(lo[e] <= hi[e])) bad = true;
          const Frame f = MakeFrame(lo[e], hi[e]);
          if (!DecodeChunk(meta + p.in.ends_offset, mi + e, f, p0[e], p1[e])) bad_ends = true;
        }
        if (bad) atomicOr(&p.status->errors, kErrBadChannelRange);
        if (bad_ends) atomicOr(&p.status->errors, kErrBadChunkEnds);
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
    const int b = page_ids[row_block];
    if (b < 0 || b >= p.dst.num_blocks) {
      atomicOr(&p.status->errors, kErrBadBlockId);
      continue;
    }
    const size_t base = p.dst.layout == Layout::kNHD
                            ? (static_cast<size_t>(b) * p.dst.block_tokens + row) * channels
                            : static_cast<size_t>(b) * p.dst.heads * p.dst.block_tokens * p.dst.head_dim +
                                  static_cast<size_t>(row) * p.dst.head_dim;
    if constexpr (VEC == 1) {
      dst[base + coff] = FromFloat<OutT>(y[0]);
    } else {
      StoreVec<OutT, VEC>(dst + base + coff, y);
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
absl::Status LaunchGroupEncode(const EncodeParams& p, const LynxDeviceTables* tb, cudaStream_t stream) {
  const dim3 grid((p.shape.channels + kGroup - 1) / kGroup, p.shape.num_pages);
  const bool octets = p.shape.channels % 8 == 0;
  if (p.shape.tokens <= kMaxStagedTokens) {
    const size_t smem = static_cast<size_t>(p.shape.tokens) * kGroup * sizeof(float);
    if (octets) {
      EncodeGroupKernel<T, VEC, kLynx, true, true><<<grid, kThreads, smem, stream>>>(p, tb);
    } else {
      EncodeGroupKernel<T, VEC, kLynx, true, false><<<grid, kThreads, smem, stream>>>(p, tb);
    }
  } else if (octets) {
    EncodeGroupKernel<T, VEC, kLynx, false, true><<<grid, kThreads, 0, stream>>>(p, tb);
  } else {
    EncodeGroupKernel<T, VEC, kLynx, false, false><<<grid, kThreads, 0, stream>>>(p, tb);
  }
  return LaunchError(kLynx ? "EncodeGroupKernel<lynx>" : "EncodeGroupKernel<uniform>");
}

template <typename T>
absl::Status LaunchEncodeTyped(SchemeKind kind, const EncodeParams& p, const LynxDeviceTables* tb,
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
absl::Status LaunchDecodeKind(const DecodeParams& p, const LynxDeviceTables* tb, cudaStream_t stream) {
  const bool vec = p.shape.channels % 8 == 0 && p.dst.head_dim % 8 == 0 && Aligned16(p.dst.data);
  const dim3 tiles(0, (p.shape.tokens + kDecodeTileTokens - 1) / kDecodeTileTokens, p.shape.num_pages);
  // Tiles of 128 tokens span at most 128 / 16 + 1 chunks of >= 16 tokens: their parameters fit shared memory.
  const bool shared = p.shape.chunk_len >= 16;
  static_assert(kDecodeTileTokens / 16 + 1 <= kDecodeMaxTileChunks, "tile chunk bound");
  if (vec) {
    const dim3 grid((p.shape.channels + 8 * kDecodeVecThreads - 1) / (8 * kDecodeVecThreads), tiles.y, tiles.z);
    if (shared) {
      DecodeKernel<OutT, 8, kKind, true><<<grid, kThreads, 0, stream>>>(p, tb);
    } else {
      DecodeKernel<OutT, 8, kKind, false><<<grid, kThreads, 0, stream>>>(p, tb);
    }
  } else {
    const dim3 grid((p.shape.channels + kDecodeVecThreads - 1) / kDecodeVecThreads, tiles.y, tiles.z);
    if (shared) {
      DecodeKernel<OutT, 1, kKind, true><<<grid, kThreads, 0, stream>>>(p, tb);
    } else {
      DecodeKernel<OutT, 1, kKind, false><<<grid, kThreads, 0, stream>>>(p, tb);
    }
  }
  return LaunchError("DecodeKernel");
}

template <typename OutT>
absl::Status LaunchDecodeTyped(SchemeKind kind, const DecodeParams& p, const LynxDeviceTables* tb,
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
  // With channels % 8 != 0 the warp-per-row packer runs, and streams whose rows do not start on 32-bit words
  // share boundary words between groups, which it ORs in: zero those streams first.
  if (scheme.kind == SchemeKind::kLynx || scheme.kind == SchemeKind::kInt8 || scheme.kind == SchemeKind::kInt4) {
    for (int i = 0; i < p.num_streams; ++i) {
      if (shape.channels % 8 != 0 && (static_cast<size_t>(shape.channels) * p.stage_bits[i]) % 32 != 0) {
        const cudaError_t e = cudaMemsetAsync(out.codes[i], 0, out.codes_stride[i] * shape.num_pages, stream);
        if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaMemsetAsync: ", cudaGetErrorName(e)));
      }
    }
  }
  const LynxDeviceTables* tb = tables;
  if ((scheme.kind == SchemeKind::kLynx) != (tb != nullptr)) {
    return absl::InternalError("lynx launches need device tables, other schemes none");
  }
  if (scheme.kind == SchemeKind::kLynx) {
    // The end pairs are ORed into zeroed words; the histogram is summed into zeroed counts.
    cudaError_t e = cudaMemsetAsync(out.meta, 0, out.meta_stride * shape.num_pages, stream);
    if (e == cudaSuccess && out.histogram != nullptr) {
      e = cudaMemsetAsync(out.histogram, 0, sizeof(uint32_t) * 256 * shape.num_pages, stream);
    }
    if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaMemsetAsync: ", cudaGetErrorName(e)));
    if (p.num_streams > 1 && (out.histogram == nullptr || out.table_floats <= 0 || out.table_floats > 128)) {
      return absl::InternalError("multi-stream lynx encode needs a histogram and 1..128 anchor table entries");
    }
  }
  const absl::Status st = [&]() -> absl::Status {
    switch (src.dtype) {
      case DType::kFloat32:
        return LaunchEncodeTyped<float>(scheme.kind, p, tb, stream);
      case DType::kBfloat16:
        return LaunchEncodeTyped<__nv_bfloat16>(scheme.kind, p, tb, stream);
      case DType::kFloat16:
        return LaunchEncodeTyped<__half>(scheme.kind, p, tb, stream);
    }
    return absl::InternalError("unknown dtype");
  }();
  if (!st.ok() || scheme.kind != SchemeKind::kLynx || p.num_streams == 1) return st;
  AnchorTableKernel<<<shape.num_pages, 128, 0, stream>>>(p, tb);
  return LaunchError("AnchorTableKernel");
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
  const LynxDeviceTables* tb = tables;
  if ((scheme.kind == SchemeKind::kLynx) != (tb != nullptr)) {
    return absl::InternalError("lynx launches need device tables, other schemes none");
  }
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
