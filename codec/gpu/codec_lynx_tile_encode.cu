// The lynx tile encoder (codec_kernels.h LynxTileEncodeFits / LaunchLynxTileEncode): LaunchEncode's fast path for
// the common shape (midrange centering, 32-token chunks, whole pages of up to 8 chunks, channels % 64 == 0). Its
// containers are byte-identical to EncodeGroupKernel's and so to the CPU reference's; compiled with --fmad=false.
//
// One block per (page, group of 64 channels), one warp per chunk. Lane (s, g) = (lane / 8, lane % 8) keeps tokens
// [8 s, 8 s + 8) of its warp's chunk x channels [8 g, 8 g + 8) of the group in registers as loaded (one 16-byte load
// per token, two for fp32): the tile never passes through shared memory. The chunk minima and maxima come from
// NaN-propagating (packed, for 16-bit input) min/max over the lane's tokens and two butterfly shuffles, the
// page-channel ranges from the chunks' through shared memory (the one block-wide barrier), then each lane quantizes
// the ends of two chunk-channels (from their grid positions, proven_ends.h), the warp writes its chunk's 46 words
// of end pairs whole (no zeroed metadata, no atomics) and each lane codes its 64 values: one 4-byte shared load
// per value (bucket base and the one threshold mantissa left to compare) and whole bytes of every stream per store.
// Multi-stream schemes: the anchor tables count the page's first 64 channels (kAnchorSampleChannels), which are
// exactly the block of group 0; that block alone counts its sampled codes in shared memory and, after one more
// barrier, writes the page's tables. With the exact-extremes rule its lanes also mark their top-cell values as
// they code, and the values that are alone in their chunk-channel's top cell leave the counts (lynx_extremes.h
// ExcludeSingleExtremes). Every other block codes and exits, like a one-stream scheme's.
#include <type_traits>

#include "codec/gpu/codec_kernels_common.cuh"
#include "codec/gpu/codec_lynx_tile_ends.cuh"

namespace kvt::codec::gpu::internal {
namespace {

constexpr int kChunkTokens = 32;                               // a chunk is a warp
constexpr int kSliceTokens = 8;                                // tokens per lane
constexpr int kMaxChunks = 8;                                  // warps per block
constexpr int kEndWords = kTileChannels * kEndPairBits23 / 32;  // 46 words: a chunk's end pairs of one group
static_assert(kTileChannels == 64, "lane (s, g) covers 8 x 8 channels");
static_assert(kTileChannels * kEndPairBits23 % 32 == 0, "a group's end pairs fill whole words");

struct TileParams {
  KvGeometry src;
  PageShape shape;
  Staging out;
  DeviceStatus* status;
  int num_streams;
  int stage_bits[kMaxStreams];
  int total_bits;
  bool exact_extremes;  // the anchor tables leave out the rule's singles
  // With the rule and 3+ streams (kStaged), each partial stage's exclusions are counted apart (s_excl).
  bool staged_counts;
  FastDivisor block_div;  // src.block_tokens
  // The bucket path (LynxDeviceTables::tile_buckets): the 16-byte pieces of the table its bucket_count uses, and
  // the magic addend; 0 pieces for the log-guess path.
  int bucket_copies;
  float magic;
  // The rest of CodeTables, from the host's copy of the tables: launch constants, so that no register holds them
  // from the row loads to the coding.
  uint32_t sign_bit;
  int max_code;
  float alpha, inv_log1p_alpha;
};

// 8 consecutive input values as loaded: 4 words of bf16/fp16 pairs, or 8 fp32 words.
template <typename T>
struct Octet {
  static constexpr int kWords = 2 * sizeof(T);
  uint32_t w[kWords];
};

template <typename T>
__device__ __forceinline__ void LoadOctet(const T* p, Octet<T>& o) {
#pragma unroll
  for (int v = 0; v < Octet<T>::kWords / 4; ++v) {
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(p) + v);
    o.w[4 * v] = r.x;
    o.w[4 * v + 1] = r.y;
    o.w[4 * v + 2] = r.z;
    o.w[4 * v + 3] = r.w;
  }
}

// The 8 values of Octet words as floats (exact conversions, as ToFloat<T>).
template <typename T>
__device__ __forceinline__ void WordsToFloats(const uint32_t* w, float* x) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = __uint_as_float(w[e]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      x[2 * j] = __uint_as_float(w[j] << 16);
      x[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      __half2 h;
      memcpy(&h, &w[j], 4);
      const float2 f = __half22float2(h);
      x[2 * j] = f.x;
      x[2 * j + 1] = f.y;
    }
  }
}

// Element-wise minimum / maximum of two Octet words, NaN if either operand is (so a NaN anywhere in a chunk's
// column ends in its minimum and maximum; an Inf ends in one of them). The sign of a zero result may differ from
// the reference's compare order, which no code depends on (the page range canonicalizes zeros; the chunk ends
// compare).
template <typename T, bool kMax>
__device__ __forceinline__ uint32_t MinMaxNan(uint32_t a, uint32_t b) {
  if constexpr (std::is_same_v<T, float>) {
    float r;
    if constexpr (kMax) {
      asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(__uint_as_float(a)), "f"(__uint_as_float(b)));
    } else {
      asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(__uint_as_float(a)), "f"(__uint_as_float(b)));
    }
    return __float_as_uint(r);
  } else {
    using Pair = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
    Pair x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    const Pair r = kMax ? __hmax2_nan(x, y) : __hmin2_nan(x, y);
    uint32_t u;
    memcpy(&u, &r, 4);
    return u;
  }
}
template <typename T>
__device__ __forceinline__ uint32_t MinNan(uint32_t a, uint32_t b) {
  return MinMaxNan<T, false>(a, b);
}
template <typename T>
__device__ __forceinline__ uint32_t MaxNan(uint32_t a, uint32_t b) {
  return MinMaxNan<T, true>(a, b);
}

// What coding a value needs, uniform over the block.
struct CodeTables {
  // Bucket path (TileParams::bucket_copies > 0): the shared table of TileBucketSum's entries j in 0..buckets
  // (codec_kernels.h), addressed as (bits(a + magic) << 2) + bucket_adj (see TileCode); magic = 2^23 / buckets.
  // 0 magic: the log-guess path, on `thr`.
  unsigned bucket_adj;
  float magic;
  const float* thr;  // shared: thresholds, +inf past M
  float alpha, inv_log1p_alpha;
  int max_code;
  uint32_t sign_bit;       // 1 << (b - 1)
  uint32_t sign_bit_high;  // sign_bit << 24, TileBucketSum's sign addend
};

// The b-bit code of x in a chunk with centre mu and inverse width inv (lynx_math.h FinalValue, MagnitudeCode), in
// the top byte of the result (the rest is not defined): the bucket path's sum (TileBucketSum) as it is, whose top
// byte the packing takes without a shift. kSign8: the codes are 8-bit (TileBucketSum8, no compare for the sign).
// xf = d * inv is never NaN for finite x (inv == 0 only for a flat chunk, where d == 0; d = +-inf only times inv >
// 0), so |Clamp(xf, -1, 1)| = min(|xf|, 1) and Clamp(xf, -1, 1) < 0 iff xf < 0 (-0 included); with inv == 0,
// +-0 gives the reference's code 0 without its test.
template <bool kBuckets, bool kSign8>
__device__ __forceinline__ uint32_t TileCode(float x, float mu, float inv, const CodeTables& ct) {
  const float d = x - mu;
  const float xf = d * inv;
  const float a = fminf(fabsf(xf), 1.0f);
  unsigned neg;
  asm("set.lt.u32.f32 %0, %1, 0f00000000;" : "=r"(neg) : "f"(xf));  // all ones or 0 (-0 is not below 0)
  if constexpr (kBuckets) {
    // a + 2^23 / buckets rounded toward zero keeps floor(a * buckets) in its low mantissa bits (the sum lies in
    // [2^23 / buckets, 2^24 / buckets), whose spacing is 1 / buckets): j = bits(sum) - bits(magic), exact.
    // One 4-byte entry a lookup: a warp's 32 lookups spread over the 32 banks, where 8-byte entries put each
    // half-warp's 16 on 16 bank pairs (about 3.3 shared-memory wavefronts a lookup against 5.9 for the values
    // of a realistic page, docs/BENCHMARKS.md). The mantissa and sign are off the lookup's dependency chain.
    const unsigned addr = (__float_as_uint(__fadd_rz(a, ct.magic)) << 2) + ct.bucket_adj;
    unsigned entry;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(entry) : "r"(addr));
    if constexpr (kSign8) {
      return TileBucketSum8(entry, __float_as_uint(__fadd_rn(xf, 0.0f)));
    } else {
      return TileBucketSum(entry, __float_as_uint(a), neg & ct.sign_bit_high);
    }
  } else {
    const int m = ct.max_code;
    int g = __float2int_rn(__logf(1.0f + ct.alpha * a) * ct.inv_log1p_alpha * static_cast<float>(m));
    g = g < 0 ? 0 : (g > m ? m : g);
    while (g > 0 && a < ct.thr[g]) --g;
    while (g < m && a >= ct.thr[g + 1]) ++g;
    return (static_cast<uint32_t>(g) | (neg & ct.sign_bit)) << 24;
  }
}

// Lane `src`'s 64-bit value (every lane of the warp takes part).
__device__ __forceinline__ unsigned long long ShflU64(unsigned long long v, int src) {
  const uint32_t lo = __shfl_sync(kFull, static_cast<uint32_t>(v), src);
  const uint32_t hi = __shfl_sync(kFull, static_cast<uint32_t>(v >> 32), src);
  return lo | static_cast<unsigned long long>(hi) << 32;
}

// The top bytes of four words (TileCode's codes) as the bytes of a word, the first in the low byte.
__device__ __forceinline__ uint32_t TopBytes4(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  return __byte_perm(__byte_perm(c0, c1, 0x0073), __byte_perm(c2, c3, 0x0073), 0x5410);
}

// Stream layouts with their own code: every other scheme takes kAnyStreams, or kStaged when it has 3 or more
// streams (the same code, plus one exclusion count array per partial stage for the exact-extremes rule, whose
// registers would cost the two-stream schemes spills).
enum class Streams { kAnyStreams, kOne8, kOne4, kTwo4, kStaged };

// Blocks per SM the register budget aims at: bf16 fits 64 registers (32 warps an SM); fp16's conversions and
// fp32's wider tile need more.
template <typename T>
constexpr int kTileMinBlocks = std::is_same_v<T, __nv_bfloat16> ? 4 : (sizeof(T) == 4 ? 2 : 3);

template <typename T, Streams kStreams>
__global__ void __launch_bounds__(kMaxChunks * 32, kTileMinBlocks<T>)
    LynxTileEncodeKernel(const TileParams p, const LynxDeviceTables* __restrict__ tables) {
  constexpr int kWords = Octet<T>::kWords;
  __shared__ __align__(16) uint32_t s_bucket[sizeof(LynxDeviceTables::tile_buckets) / sizeof(uint32_t)];
  __shared__ float s_thr[128 + kMaxDeviceCorrections];
  __shared__ unsigned s_hist[256];
  constexpr bool kGeneric = kStreams == Streams::kAnyStreams || kStreams == Streams::kStaged;
  // kStaged with the rule: each partial stage's exclusion counts (its own table's).
  constexpr int kExclStages = kStreams == Streams::kStaged ? kTileExclusionStages : 1;
  __shared__ unsigned s_excl[kStreams == Streams::kStaged ? kTileExclusionStages * 256 : 1];
  __shared__ __align__(16) float s_cmin[kMaxChunks][kTileChannels];
  __shared__ __align__(16) float s_cmax[kMaxChunks][kTileChannels];
  __shared__ __align__(16) float s_mu[kMaxChunks][kTileChannels];
  __shared__ __align__(16) float s_inv[kMaxChunks][kTileChannels];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int k = tid >> 5;  // the warp's chunk
  const int g = lane & 7;  // channels [8 g, 8 g + 8) of the group
  const int s = lane >> 3;  // tokens [8 s, 8 s + 8) of the chunk
  const int page = blockIdx.y;
  const int c0 = blockIdx.x * kTileChannels;
  const int channels = p.shape.channels;
  const int tokens = p.shape.tokens;
  const int num_chunks = p.shape.num_chunks;
  const int t0 = k * kChunkTokens + s * kSliceTokens;
  // The block id of the lane's first row, asked for first: the row loads wait for it.
  const int32_t* ids = p.src.block_ids + static_cast<size_t>(page) * p.src.blocks_per_page;
  const int j0 = p.block_div.Divide(t0);
  const int b0 = ids[j0];

  // The bucket table goes next (its size is a launch parameter), straight into shared memory: cp.async takes no
  // registers and is waited for only at the block's barrier.
  {
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(s_bucket));
    const size_t src = __cvta_generic_to_global(tables->tile_buckets);
    static_assert(sizeof(LynxDeviceTables::tile_buckets) % 16 == 0, "whole 16-byte copies");
    for (int i = tid; i < p.bucket_copies; i += blockDim.x) {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst + 16 * i), "l"(src + 16 * i) : "memory");
    }
  }

  // The lane's 8 rows, all 8 loads in flight together. With blocks of a multiple of 8 tokens its tokens are
  // consecutive rows of one block; otherwise a cursor over the page's blocks.
  Octet<T> x[kSliceTokens];
  {
    const int bt = p.src.block_tokens;
    const T* src = static_cast<const T*>(p.src.data) + ChannelOffset(p.src, 0, c0 + 8 * g);
    const bool nhd = p.src.layout == Layout::kNhd;
    auto row_offset = [&](int b, int r) -> size_t {
      return nhd ? (static_cast<size_t>(b) * bt + r) * channels
                 : static_cast<size_t>(b) * p.src.heads * bt * p.src.head_dim + static_cast<size_t>(r) * p.src.head_dim;
    };
    bool bad = false;
    if (bt % kSliceTokens == 0) {
      bad = b0 < 0 || b0 >= p.src.num_blocks;
      const T* row = src + row_offset(bad ? 0 : b0, t0 - j0 * bt);
      const size_t stride = nhd ? channels : p.src.head_dim;
#pragma unroll
      for (int i = 0; i < kSliceTokens; ++i) {
        if (!bad) {
          LoadOctet<T>(row + i * stride, x[i]);
        } else {
#pragma unroll
          for (int w = 0; w < kWords; ++w) x[i].w[w] = 0;  // +0 values, as the general kernel reads them
        }
      }
    } else {
      int b[kSliceTokens], r[kSliceTokens];
      int j = j0, row = t0 - j * bt;
#pragma unroll
      for (int i = 0; i < kSliceTokens; ++i) {
        b[i] = i == 0 ? b0 : ids[j];  // (the asm's memory clobber would make ids[j0] a second load)
        r[i] = row;
        if (++row == bt) row = 0, ++j;
      }
#pragma unroll
      for (int i = 0; i < kSliceTokens; ++i) {
        if (b[i] >= 0 && b[i] < p.src.num_blocks) {
          LoadOctet<T>(src + row_offset(b[i], r[i]), x[i]);
        } else {
          bad = true;
#pragma unroll
          for (int w = 0; w < kWords; ++w) x[i].w[w] = 0;
        }
      }
    }
    if (bad) atomicOr(&p.status->errors, kErrBadBlockId);
  }

  // The thresholds (log-guess path) and counts, while the loads are in flight.
  const bool use_buckets = p.bucket_copies > 0;
  if (!use_buckets) {
    for (int i = tid; i < 128 + kMaxDeviceCorrections; i += blockDim.x) s_thr[i] = tables->thresholds[i];
  }
  for (int i = tid; i < 256; i += blockDim.x) s_hist[i] = 0;
  if constexpr (kStreams == Streams::kStaged) {
    for (int i = tid; i < kTileExclusionStages * 256; i += blockDim.x) s_excl[i] = 0;
  }

  // Chunk minimum and maximum of the lane's 8 channels: over its 8 tokens, then over the warp's 4 token slices.
  float cmin[8], cmax[8];
  {
    uint32_t mn[kWords], mx[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) mn[w] = mx[w] = x[0].w[w];
#pragma unroll
    for (int i = 1; i < kSliceTokens; ++i) {
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        mn[w] = MinNan<T>(mn[w], x[i].w[w]);
        mx[w] = MaxNan<T>(mx[w], x[i].w[w]);
      }
    }
#pragma unroll
    for (int o = 8; o < 32; o <<= 1) {
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        mn[w] = MinNan<T>(mn[w], __shfl_xor_sync(kFull, mn[w], o));
        mx[w] = MaxNan<T>(mx[w], __shfl_xor_sync(kFull, mx[w], o));
      }
    }
    WordsToFloats<T>(mn, cmin);
    WordsToFloats<T>(mx, cmax);
  }
  bool finite = true;
#pragma unroll
  for (int e = 0; e < 8; ++e) finite = finite && isfinite(cmin[e]) && isfinite(cmax[e]);
  if (!finite) {  // a NaN or Inf in the lane's columns of the chunk: name each of the lane's own
#pragma unroll
    for (int i = 0; i < kSliceTokens; ++i) {
      float v[8];
      WordsToFloats<T>(x[i].w, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (!isfinite(v[e])) ReportNonFinite(p.status, page, tokens, channels, t0 + i, c0 + 8 * g + e);
      }
    }
  }
  if (s == 0) {
    float4* dmin = reinterpret_cast<float4*>(&s_cmin[k][8 * g]);
    float4* dmax = reinterpret_cast<float4*>(&s_cmax[k][8 * g]);
    dmin[0] = make_float4(cmin[0], cmin[1], cmin[2], cmin[3]);
    dmin[1] = make_float4(cmin[4], cmin[5], cmin[6], cmin[7]);
    dmax[0] = make_float4(cmax[0], cmax[1], cmax[2], cmax[3]);
    dmax[1] = make_float4(cmax[4], cmax[5], cmax[6], cmax[7]);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's bucket copies; the barrier then shows all
  __syncthreads();

  // Lane L: chunk-channels (k, 2 L) and (k, 2 L + 1). The page-channel range is the min / max of the chunks'
  // (lynx_kernels_ref.cc RefStatsRange up to the sign of a zero, which is canonicalized).
  uint8_t* meta = p.out.meta + page * p.out.meta_stride;
  {
    const int cc = 2 * lane;
    float lo[2], hi[2];
    lo[0] = lo[1] = __int_as_float(0x7f800000);
    hi[0] = hi[1] = -lo[0];
    for (int kk = 0; kk < num_chunks; ++kk) {
      const float2 a = *reinterpret_cast<const float2*>(&s_cmin[kk][cc]);
      const float2 b = *reinterpret_cast<const float2*>(&s_cmax[kk][cc]);
      lo[0] = fminf(lo[0], a.x);  // a NaN operand is ignored, as by a compare-and-select; zeros are canonical below
      lo[1] = fminf(lo[1], a.y);
      hi[0] = fmaxf(hi[0], b.x);
      hi[1] = fmaxf(hi[1], b.y);
    }
    const float2 kmin = *reinterpret_cast<const float2*>(&s_cmin[k][cc]);
    const float2 kmax = *reinterpret_cast<const float2*>(&s_cmax[k][cc]);
    Frame f[2];
    float cmin[2] = {kmin.x, kmin.y}, cmax[2] = {kmax.x, kmax.y};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lo[h] = lo[h] == 0.0f ? 0.0f : lo[h];  // canonical zero
      hi[h] = hi[h] == 0.0f ? 0.0f : hi[h];
      f[h] = MakeChannelFrame(lo[h], hi[h], kEndGridMax);
    }
    int ql[2], qh[2];
    float a[2], b[2];  // ChunkEnd(f, ql), ChunkEnd(f, qh)
    if (!ProvenEnds2(f, cmin, cmax, ql, qh, a, b)) {
      SearchEnds2(lo, hi, &s_cmin[k][cc], &s_cmax[k][cc], ql, qh, a, b);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // QuantizeEndAbove's max with q_low: a guard (cmin <= cmax and ChunkEnd rises strictly inside the domain,
      // so the proven ends never cross; the search already takes it).
      if (qh[h] < ql[h]) {
        qh[h] = ql[h];
        b[h] = a[h];
      }
    }
    float mu[2], inv[2];
    unsigned idx[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // ChunkCentreAndWidth from the two ends.
      const float m = Clamp(0.5f * a[h] + 0.5f * b[h], a[h], b[h]);
      const float up = b[h] - m;
      const float down = m - a[h];
      const float sg = up > down ? up : down;
      inv[h] = InverseSigma(sg < 3.40282347e+38f ? sg : 3.40282347e+38f);
      mu[h] = m;
      idx[h] = static_cast<unsigned>(qh[h]) * static_cast<unsigned>(qh[h] + 1) / 2 + static_cast<unsigned>(ql[h]);
    }
    if (k == 0) {
      reinterpret_cast<float2*>(meta)[(c0 + cc) / 2] = make_float2(lo[0], lo[1]);
      reinterpret_cast<float2*>(meta)[(channels + c0 + cc) / 2] = make_float2(hi[0], hi[1]);
    }
    *reinterpret_cast<float2*>(&s_mu[k][cc]) = make_float2(mu[0], mu[1]);
    *reinterpret_cast<float2*>(&s_inv[k][cc]) = make_float2(inv[0], inv[1]);
    // The chunk's end pairs of the group, fields (k channels + c0 + f) * 23 bits: they start on a word, as
    // k channels + c0 is a multiple of 32. Lane L holds bits [46 L, 46 L + 46) of them (fields 2 L and 2 L + 1);
    // word w (bits [32 w, 32 w + 32)) starts in lane a = 32 w / 46 and ends there or in lane a + 1, so each
    // lane builds word L, and lanes 0..13 word L + 32 too, from two lanes' bits fetched by shuffles.
    const unsigned long long mine = idx[0] | static_cast<unsigned long long>(idx[1]) << kEndPairBits23;
    uint32_t* ends = reinterpret_cast<uint32_t*>(meta + p.out.ends_offset) +
                     (static_cast<size_t>(k) * channels + c0) / 32 * kEndPairBits23;
    constexpr int kLaneBits = 2 * kEndPairBits23;
#pragma unroll
    for (int round = 0; round < 2; ++round) {
      const int w = lane + 32 * round;
      const int wc = min(w, kEndWords - 1);  // lanes past the last word compute it again, and store nothing
      const int a = 32 * wc / kLaneBits, o = 32 * wc - kLaneBits * a;  // a <= 31, o < 46
      const unsigned long long first = ShflU64(mine, a), next = ShflU64(mine, min(a + 1, 31));
      // Lane 31 ends the stream (word 45 takes exactly its last 32 bits): the `next` of a = 31 shifts out.
      const uint32_t word = static_cast<uint32_t>((first >> o) | (next << (kLaneBits - o)));
      if (w < kEndWords) ends[w] = word;
    }
  }
  __syncwarp();  // s_mu and s_inv, for the warp's other lanes

  // Code the lane's 64 values: each stream's fields of a row's 8 values fill whole bytes, at a fixed stride.
  float mu[8], inv[8];
  {
    const float4* pm = reinterpret_cast<const float4*>(&s_mu[k][8 * g]);
    const float4* pi = reinterpret_cast<const float4*>(&s_inv[k][8 * g]);
    const float4 m0 = pm[0], m1 = pm[1], i0 = pi[0], i1 = pi[1];
    mu[0] = m0.x, mu[1] = m0.y, mu[2] = m0.z, mu[3] = m0.w, mu[4] = m1.x, mu[5] = m1.y, mu[6] = m1.z, mu[7] = m1.w;
    inv[0] = i0.x, inv[1] = i0.y, inv[2] = i0.z, inv[3] = i0.w, inv[4] = i1.x, inv[5] = i1.y, inv[6] = i1.z,
    inv[7] = i1.w;
  }
  CodeTables ct;
  ct.thr = s_thr;
  ct.alpha = p.alpha;
  ct.inv_log1p_alpha = p.inv_log1p_alpha;
  ct.max_code = p.max_code;
  ct.sign_bit = p.sign_bit;
  ct.sign_bit_high = p.sign_bit << 24;
  ct.magic = p.magic;
  ct.bucket_adj = static_cast<unsigned>(__cvta_generic_to_shared(s_bucket)) - (__float_as_uint(ct.magic) << 2);
  // The block that holds the anchor tables' channels counts (block-uniform, so its branches are too). Decided
  // here, not at the kernel's start: held from there, it cost the two-stream bf16 instance an 8-byte spill and a
  // microsecond (docs/BENCHMARKS.md, eighteenth session).
  static_assert(kTileChannels == kAnchorSampleChannels, "group 0 is the tables' channels");
  const bool counting = p.num_streams > 1 && blockIdx.x == 0;
  // The exact-extremes rule's singles leave the anchor tables (lynx_extremes.h ExcludeSingleExtremes): with two
  // streams straight out of the one table's counts, with more into each partial stage's s_excl. Per partial
  // stage st: marks[st], the top cells the lane's slice has seen (TopCells' nibble layout: bit 4 e for the top
  // positive cell of channel e, 4 e + 1 for the negative one); ex_sampled[st] the hits of rows 0 (bits 4 e,
  // 4 e + 1) and 4 (bits 4 e + 2, 4 e + 3), the slice's sampled tokens (t0 % 8 == 0); `keep` what their codes
  // need: rows 0 and 4's residual words (kTwo4) or code bytes.
  const bool excluding = counting && p.exact_extremes;
  const int partial = p.num_streams - 1;
  TopCells marks[kExclStages];
  uint32_t ex_sampled[kExclStages];
#pragma unroll
  for (int st = 0; st < kExclStages; ++st) ex_sampled[st] = 0;
  uint32_t keep[4] = {0, 0, 0, 0};
  // Octets (8 values) of the page before the lane's first row, and per row: 32-bit (a page has <= 2^26 values).
  const unsigned octet0 = (static_cast<unsigned>(t0) * channels + c0 + 8 * g) >> 3;
  const unsigned row_octets = static_cast<unsigned>(channels) >> 3;
  uint8_t* out0 = p.out.codes[0] + page * p.out.codes_stride[0];
  uint8_t* out1 = p.out.codes[kStreams == Streams::kTwo4 ? 1 : 0] +
                  page * p.out.codes_stride[kStreams == Streams::kTwo4 ? 1 : 0];
  // kOne8, kOne4 and kTwo4: the lane's first row in each stream, stepped a row at a time.
  constexpr int kOctetBytes = kStreams == Streams::kOne8 ? 8 : 4;
  const unsigned row_bytes = row_octets * kOctetBytes;  // < 2^26
  // The one-stream 8-bit and the 4 + 4 layouts code 8 bits; the generic ones may not.
  constexpr bool kSign8 = kStreams == Streams::kOne8 || kStreams == Streams::kTwo4;
  auto code_rows = [&](auto buckets_tag) {
    constexpr bool kBuckets = decltype(buckets_tag)::value;
    // (kGeneric stores through StoreFields instead.)
    [[maybe_unused]] uint8_t* row0 = out0 + static_cast<size_t>(octet0) * kOctetBytes;
    [[maybe_unused]] uint8_t* row1 = out1 + static_cast<size_t>(octet0) * kOctetBytes;
#pragma unroll
    for (int i = 0; i < kSliceTokens; ++i) {
      float v[8];
      WordsToFloats<T>(x[i].w, v);
      // The codes in their words' top bytes, packed four to a word from there.
      uint32_t top[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) top[e] = TileCode<kBuckets, kSign8>(v[e], mu[e], inv[e], ct);
      const uint32_t lo4 = TopBytes4(top[0], top[1], top[2], top[3]);
      const uint32_t hi4 = TopBytes4(top[4], top[5], top[6], top[7]);
      // The 4-bit streams' packing takes the even and the odd values' codes: nibble pair i of a word is byte i.
      const uint32_t even = TopBytes4(top[0], top[2], top[4], top[6]);
      const uint32_t odd = TopBytes4(top[1], top[3], top[5], top[7]);
      // As numbers, where the histogram and the generic layouts need them: the histogram's from the packed words,
      // so that the eight words are dead after the packing.
      [[maybe_unused]] uint32_t code[8];
      if constexpr (kGeneric) {
#pragma unroll
        for (int e = 0; e < 8; ++e) code[e] = top[e] >> 24;
      }
      if (counting && i % kAnchorSampleStride == 0) {  // t % 4 == 0: t0 is a multiple of 8
#pragma unroll
        for (int e = 0; e < 8; ++e) atomicAdd(&s_hist[((e % 2 == 0 ? even : odd) >> (8 * (e / 2))) & 0xFFu], 1u);
      }
      if constexpr (kGeneric) {
        if (excluding) {  // each partial stage's prefixes, compared one by one
          int known = 0;
#pragma unroll
          for (int st = 0; st < kExclStages; ++st) {
            if (st >= partial) break;
            known += p.stage_bits[st];
            const int shift = p.total_bits - known;
            const uint32_t top_pos = (1u << (known - 1)) - 1, top_neg = (1u << known) - 1;
            uint32_t m = 0;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              const uint32_t prefix = code[e] >> shift;
              m |= (prefix == top_pos ? 1u : 0u) << (4 * e) | (prefix == top_neg ? 2u : 0u) << (4 * e);
            }
            marks[st].Add(m);
            if (i % kAnchorSampleStride == 0) ex_sampled[st] |= m << (i == 0 ? 0 : 2);
          }
          if (i % kAnchorSampleStride == 0) {
            keep[i == 0 ? 0 : 2] = lo4;
            keep[i == 0 ? 1 : 3] = hi4;
          }
        }
      }
      if constexpr (kStreams == Streams::kOne8) {
        *reinterpret_cast<uint2*>(row0) = make_uint2(lo4, hi4);
      } else if constexpr (kStreams == Streams::kOne4) {
        *reinterpret_cast<uint32_t*>(row0) = even | odd << 4;  // codes < 16
      } else if constexpr (kStreams == Streams::kTwo4) {
        // Each byte's two top nibbles, then its two low ones (one shift and one bit select a word).
        const uint32_t anchor = ((even >> 4) & 0x0F0F0F0Fu) | (odd & 0xF0F0F0F0u);
        const uint32_t resid = (even & 0x0F0F0F0Fu) | ((odd << 4) & 0xF0F0F0F0u);
        *reinterpret_cast<uint32_t*>(row0) = anchor;
        *reinterpret_cast<uint32_t*>(row1) = resid;
        if (excluding) {  // nibble e of the anchor word is channel e's anchor: 0x7 and 0xF are the top cells
          const uint32_t m = NibbleTopCells(anchor);
          marks[0].Add(m);
          if (i % kAnchorSampleStride == 0) {
            ex_sampled[0] |= m << (i == 0 ? 0 : 2);
            keep[i == 0 ? 0 : 1] = resid;
          }
        }
      } else {
        const unsigned octet = octet0 + i * row_octets;
        int shift = p.total_bits;
        for (int st = 0; st < p.num_streams; ++st) {
          const int w = p.stage_bits[st];
          shift -= w;
          const uint32_t mask = (1u << w) - 1;
          unsigned long long packed;
          if (w == 8) {
            packed = lo4 | (static_cast<unsigned long long>(hi4) << 32);
          } else if (w == 4) {
            const uint32_t f_lo = (lo4 >> shift) & 0x0F0F0F0Fu, f_hi = (hi4 >> shift) & 0x0F0F0F0Fu;
            packed = __byte_perm(f_lo, f_hi, 0x6420) | (__byte_perm(f_lo, f_hi, 0x7531) << 4);
          } else {
            packed = 0;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              packed |= static_cast<unsigned long long>((code[e] >> shift) & mask) << (e * w);
            }
          }
          StoreFields(p.out.codes[st] + page * p.out.codes_stride[st] + static_cast<size_t>(octet) * w, packed, w);
        }
      }
      if constexpr (!kGeneric) {
        row0 += row_bytes;
        row1 += row_bytes;
      }
    }
  };
  if (use_buckets) {
    code_rows(std::true_type{});
  } else {
    code_rows(std::false_type{});
  }
  if (excluding) {
    // Per partial stage, the chunk's four slices (lanes g, g + 8, g + 16, g + 24) merge their marks; the lane
    // whose slice holds a chunk-channel's only top-cell value of a sign takes its code back out of the counts if
    // its row is sampled. One round of three independent shuffles of the packed marks (one fewer than two
    // dependent rounds of seen and again; the block timeline measured the tail no faster for it).
#pragma unroll
    for (int st = 0; st < kExclStages; ++st) {
      if (st >= partial) break;
      const uint32_t mine = marks[st].seen;
      const uint32_t packed = marks[st].PackNibbles();
      uint32_t others[3];
#pragma unroll
      for (int o = 0; o < 3; ++o) others[o] = __shfl_sync(kFull, packed, (lane + 8 * (o + 1)) & 31);
      TopCells chunk = marks[st];
#pragma unroll
      for (int o = 0; o < 3; ++o) chunk.Merge(TopCells::UnpackNibbles(others[o]));
      const uint32_t single = chunk.Once() & mine;
      // Both sampled rows in one loop (bit 4 e + 2 row + negative), so the warp runs the most any lane has in
      // all, not the most of row 0 plus the most of row 4.
      for (uint32_t m = ex_sampled[st] & (single | single << 2); m != 0; m &= m - 1) {
        const int b = __ffs(m) - 1;
        const int e = b >> 2;
        const bool row4 = (b & 2) != 0;
        uint32_t code;
        if constexpr (kStreams == Streams::kTwo4) {
          code = ((b & 1) ? 0xF0u : 0x70u) | (((row4 ? keep[1] : keep[0]) >> (4 * e)) & 0xFu);
        } else {
          const uint32_t word = row4 ? (e < 4 ? keep[2] : keep[3]) : (e < 4 ? keep[0] : keep[1]);
          code = (word >> (8 * (e & 3))) & 0xFFu;
        }
        if (kStreams == Streams::kTwo4 || partial == 1) {
          atomicSub(&s_hist[code], 1u);  // the one table's counts
        } else if constexpr (kStreams == Streams::kStaged) {
          atomicAdd(&s_excl[256 * st + code], 1u);
        }
      }
    }
  }
  if (!counting) return;

  // The page's anchor tables from this block's counts (and, with 3+ streams and the rule, each partial stage's
  // exclusions), once every lane has counted.
  __syncthreads();
  uint8_t* table = meta + p.out.tables_offset;
  for (int j = tid; j < p.out.table_floats; j += blockDim.x) {
    const float v = AnchorTableEntry(j, s_hist, kStreams == Streams::kStaged && p.staged_counts ? s_excl : nullptr,
                                     p.num_streams, p.stage_bits, p.total_bits, tables->full_values,
                                     tables->anchor_fallback);
    StoreF32(table + 4 * static_cast<size_t>(j), v);
  }
}

}  // namespace

bool LynxTileEncodeFits(const Scheme& scheme, bool centering_mean, bool exact_extremes, const KvGeometry& src,
                        const PageShape& shape, const Staging& out) {
  if (scheme.kind != SchemeKind::kLynx || centering_mean) return false;
  // Version 3's metadata only: 23-bit end pairs on the 4095-point grid (proven_ends.h), no frame spikes.
  if (shape.end_pair_bits != kEndPairBits23 || shape.grid_max != kEndGridMax || shape.frame_spikes != 0) return false;
  // The exact-extremes rule's singles are counted here for up to kTileExclusionStages partial stages.
  if (exact_extremes && scheme.num_streams() > 1 + kTileExclusionStages) return false;
  if (shape.chunk_len != kChunkTokens || shape.num_chunks < 1 || shape.num_chunks > kMaxChunks ||
      shape.tokens != shape.num_chunks * kChunkTokens) {
    return false;
  }
  if (shape.channels % kTileChannels != 0 || src.head_dim % 8 != 0 || !Aligned16(src.data)) return false;
  if (scheme.num_streams() > 1 && (out.table_floats <= 0 || out.table_floats > 128)) {
    return false;
  }
  return true;
}

absl::Status LaunchLynxTileEncode(const Scheme& scheme, bool exact_extremes, const LynxDeviceTables* tables,
                                  const LynxDeviceTables& host_tables, const KvGeometry& src, const PageShape& shape,
                                  const Staging& out, DeviceStatus* status, void* stream_handle) {
  // The 8-bit layouts take the sign from bit 31 (TileBucketSum8): the tables must be the scheme's width.
  if (host_tables.bits != scheme.total_code_bits()) {
    return absl::InternalError(absl::StrCat("lynx tables of ", host_tables.bits, " bits for a scheme of ",
                                            scheme.total_code_bits(), " code bits"));
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  TileParams p;
  p.src = src;
  p.shape = shape;
  p.out = out;
  p.status = status;
  p.num_streams = scheme.num_streams();
  p.total_bits = scheme.total_code_bits();
  for (int i = 0; i < kMaxStreams; ++i) p.stage_bits[i] = i < p.num_streams ? scheme.stage_bits[i] : 0;
  p.exact_extremes = exact_extremes;
  p.staged_counts = exact_extremes && p.num_streams > 2;
  p.block_div = FastDivisor::For(src.block_tokens);
  const int buckets = host_tables.bucket_count;  // > 0 only with one correction
  const bool use_buckets = TakesTileBuckets(buckets);
  // Entries 0..buckets of 4 bytes, in whole 16-byte pieces (the padding completes the last).
  p.bucket_copies = use_buckets ? buckets / 4 + 1 : 0;
  p.magic = use_buckets ? TileBucketMagic(buckets) : 0.0f;
  p.sign_bit = 1u << (host_tables.bits - 1);
  p.max_code = host_tables.max_code;
  p.alpha = host_tables.alpha;
  p.inv_log1p_alpha = host_tables.inv_log1p_alpha;
  static_assert(sizeof(LynxDeviceTables::tile_buckets) >= 16 * (kMaxTileBuckets / 4 + 1), "the pieces exist");
  const dim3 grid(shape.channels / kTileChannels, shape.num_pages);
  const int threads = 32 * shape.num_chunks;
  const int n = p.num_streams;
  const Streams streams = n == 1 && p.stage_bits[0] == 8   ? Streams::kOne8
                          : n == 1 && p.stage_bits[0] == 4 ? Streams::kOne4
                          : n == 2 && p.stage_bits[0] == 4 && p.stage_bits[1] == 4 ? Streams::kTwo4
                          : n > 2                                                  ? Streams::kStaged
                                                                                   : Streams::kAnyStreams;
  auto launch = [&](auto* kernel) { kernel<<<grid, threads, 0, stream>>>(p, tables); };
  auto by_streams = [&](auto type_tag) {
    using T = typename decltype(type_tag)::type;
    switch (streams) {
      case Streams::kOne8:
        return launch(LynxTileEncodeKernel<T, Streams::kOne8>);
      case Streams::kOne4:
        return launch(LynxTileEncodeKernel<T, Streams::kOne4>);
      case Streams::kTwo4:
        return launch(LynxTileEncodeKernel<T, Streams::kTwo4>);
      case Streams::kAnyStreams:
        return launch(LynxTileEncodeKernel<T, Streams::kAnyStreams>);
      case Streams::kStaged:
        return launch(LynxTileEncodeKernel<T, Streams::kStaged>);
    }
  };
  return ForDType(src.dtype, [&](auto tag) {
    by_streams(tag);
    return LaunchError("LynxTileEncodeKernel");
  });
}

}  // namespace kvt::codec::gpu::internal
