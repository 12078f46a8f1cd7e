// Device-side pieces shared by the encode and decode kernels (codec_encode_kernels.cu, codec_decode_kernels.cu):
// the reference's float semantics, the frame of a page-channel, element types and addressing, bit packing, and
// the launch-error check. Included only by those two files (each gets its own copy: the unnamed namespace is
// deliberate, as device code is compiled per translation unit). Compile with --fmad=false.
#ifndef KVT_CODEC_GPU_CODEC_KERNELS_COMMON_CUH_
#define KVT_CODEC_GPU_CODEC_KERNELS_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "codec/gpu/codec_kernels.h"
#include "common/cuda_util.h"
#include "codec/gpu/fast_divisor.h"
#include "numerics/e4m3.h"
#include "numerics/float16.h"
#include "codec/internal/lynx_grid.h"

namespace kvt::codec::gpu::internal {
namespace {


constexpr int kThreads = 256;
constexpr int kGroup = 32;                        // channels per encode block: one per lane
constexpr int kRounds = kThreads / kGroup;        // chunk rows whose statistics one round computes
constexpr int kMaxStagedTokens = 256;             // tile = tokens * 32 floats <= 32 KiB of shared memory
constexpr int kMaxStagedTokens16 = 2048;          // 16-bit input: tile = tokens * 32 x 2 bytes <= 128 KiB
constexpr int kInBlockFrameSpikes = 3;            // frame spikes a staged group encode selects itself
static_assert(kInBlockFrameSpikes == kDefaultFrameSpikes, "the default's encode selects in its blocks");
constexpr int kDecodeVecThreads = 16;             // threads across channels in a decode block
constexpr int kDecodeSlices = kThreads / kDecodeVecThreads;
constexpr int kDecodeTokensPerThread = 8;
constexpr int kDecodeTileTokens = kDecodeSlices * kDecodeTokensPerThread;  // 128
constexpr int kDecodeMinBlocks = 4;  // caps registers at 64 so four 256-thread blocks share an SM
constexpr int kDecodeOnceMinBlocks = 3;  // chunk parameters held for all 8 tokens: up to 80 registers
constexpr int kDecodeMaxTileChunks = 9;  // chunks a 128-token tile spans when chunks have >= 16 tokens
constexpr unsigned kFull = 0xffffffffu;

// ---- The reference's float semantics -------------------------------------------------------------------

__device__ __forceinline__ float RefFmax(float x, float y) {
  return x >= y ? x : (y > x ? y : (isnan(y) ? x : y));
}

// The chunk end grid and the clamp: lynx_grid.h's functions, which the CPU reference runs too.
using ::kvt::codec::internal::ChunkCentreAndWidth;
using ::kvt::codec::internal::ChunkEnd;
using ::kvt::codec::internal::Clamp;
using ::kvt::codec::internal::EndOffset;
using ::kvt::codec::internal::kEndGridMax;
using ::kvt::codec::internal::MakeChannelFrame;
using ::kvt::codec::internal::MaxEndPairIndex;
// Version 3's end pair width: the tile encoder's only one (LynxTileEncodeFits).
constexpr int kEndPairBits23 = 23;
using ::kvt::codec::internal::QuantizeChunkEnds;
using Frame = ::kvt::codec::internal::ChannelFrame;
constexpr int kAnchorSampleStride = 4;  // the anchor tables count tokens t % 4 == 0 (lynx_math.h)
// q_high = h is the largest h with h (h + 1) / 2 <= index, q_low the rest, on the grid 0..grid_max. The f32 square
// root guesses h within one of it for every valid index of every grid (their indices are a prefix of the 23-bit
// grid's): end_pair_guess_test.cc checks all 8386560 of them with the reciprocal square root off by up to 2^-19
// (16 times rsqrt.approx.f32's documented bound). So one step each way, without branches, corrects it exactly in
// 32-bit integers (h <= 4094 keeps (h + 1) (h + 2) / 2 below 2^24); the check that q_low lies in [0, h] would
// turn a miss into a bad pair (DATA_LOSS) rather than wrong values. x >= 1 has no subnormal to care about:
// rsqrt.approx.ftz skips rsqrtf's scaling for one.
__device__ __forceinline__ bool EndPairFromIndex(unsigned index, int grid_max, int& q_low, int& q_high) {
  const unsigned max_index = MaxEndPairIndex(grid_max);
  const unsigned i = index < max_index ? index : max_index;
  const float x = 8.0f * static_cast<float>(i) + 1.0f;
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  int g = static_cast<int>((x * r - 1.0f) * 0.5f);
  unsigned h = g < 0 ? 0u : (g > grid_max ? static_cast<unsigned>(grid_max) : static_cast<unsigned>(g));
  h -= h * (h + 1) / 2 > i ? 1 : 0;  // unsigned: the triangles are shifts, and h >= 0 throughout
  h += (h + 1) * (h + 2) / 2 <= i ? 1 : 0;
  const int low = static_cast<int>(i) - static_cast<int>(h * (h + 1) / 2);
  q_high = static_cast<int>(h);
  q_low = low;
  return index <= max_index && low >= 0 && low <= q_high;
}
// The `bits`-bit end pair index of chunk-channel i from the packed field array (LSB-first; the staging leaves
// room past the array for the 4-byte read).
__device__ __forceinline__ unsigned ReadEndPair(const uint8_t* ends, size_t i, int bits) {
  const size_t bit = i * bits;
  const uint8_t* q = ends + bit / 8;
  const unsigned v = q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<unsigned>(q[3]) << 24);
  return (v >> (bit % 8)) & ((1u << bits) - 1);
}
// ReadEndPair from two aligned 32-bit loads; `ends` must be 4-byte aligned (the staging's end pairs are: they
// start 8 * channels bytes into 256-byte-aligned metadata) with a readable word past the field's. i < 2^22 (a
// page has at most 2^26 values, chunks >= 16 tokens here), so i * bits fits 32 bits. In two halves, so that a
// kernel can ask for the words early and cut the pair out once it needs it.
struct EndPairWords {
  uint32_t lo = 0, hi = 0;
};
__device__ __forceinline__ EndPairWords LoadEndPairWords(const uint8_t* ends, unsigned i, int bits) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(ends) + i * bits / 32;
  return EndPairWords{w[0], w[1]};
}
__device__ __forceinline__ unsigned CutEndPair(const EndPairWords& w, unsigned i, int bits) {
  return __funnelshift_r(w.lo, w.hi, i * bits % 32) & ((1u << bits) - 1);
}
__device__ __forceinline__ unsigned ReadEndPairAligned(const uint8_t* ends, unsigned i, int bits) {
  return CutEndPair(LoadEndPairWords(ends, i, bits), i, bits);
}
// A word of 8 4-bit anchor codes (sign in bit 3 of each nibble): 0x1 in nibble e where code e has the top magnitude
// (the top cell of its sign), and its sign bits.
__device__ __forceinline__ uint32_t NibbleTops(uint32_t w) { return w & (w >> 1) & (w >> 2) & 0x11111111u; }
__device__ __forceinline__ uint32_t NibbleSigns(uint32_t w) { return (w >> 3) & 0x11111111u; }
// The word's top cells, bit 4 e for nibble e's channel if positive, bit 4 e + 1 if negative (a negative's mark
// moves up from bit 4 e): TopCells' nibble layout.
__device__ __forceinline__ uint32_t NibbleTopCells(uint32_t w) {
  const uint32_t top = NibbleTops(w);
  return top + (top & NibbleSigns(w));
}
// Which top cells (of 8 channels x 2 signs) a set of rows of one chunk has seen once or more (seen) and twice or
// more (again): the exact-extremes rule's marks in the tile encoder and decoder. Merging is associative, so rows
// can be folded in any grouping. Two bit layouts: by prefix byte (bit e = prefix byte e's channel, positive; bit
// 8 + e = negative) and by the nibble of a 4-bit code word (NibbleTopCells: bit 4 e = nibble e's channel,
// positive; bit 4 e + 1 = negative).
struct TopCells {
  uint32_t seen = 0, again = 0;
  __device__ __forceinline__ void Add(uint32_t cells) {
    again |= seen & cells;
    seen |= cells;
  }
  __device__ __forceinline__ void Merge(const TopCells& o) {
    again |= o.again | (seen & o.seen);
    seen |= o.seen;
  }
  __device__ __forceinline__ uint32_t Once() const { return seen & ~again; }
  __device__ __forceinline__ uint32_t Pack() const { return seen | (again << 16); }
  __device__ __forceinline__ static TopCells Unpack(uint32_t w) { return TopCells{w & 0xFFFFu, w >> 16}; }
  // The nibble layout uses bits 4 e and 4 e + 1; `again` packs beside them.
  __device__ __forceinline__ uint32_t PackNibbles() const { return seen | (again << 2); }
  __device__ __forceinline__ static TopCells UnpackNibbles(uint32_t w) {
    return TopCells{w & 0x33333333u, (w >> 2) & 0x33333333u};
  }
};
// A page's frame spikes in its staged metadata (Staging::frame_offset): f32 values [spike][channel], then u16
// tokens in the same order.
__device__ __forceinline__ uint8_t* FrameSpikeValues(const Staging& st, const PageShape&, int page) {
  return st.meta + static_cast<size_t>(page) * st.meta_stride + st.frame_offset;
}
__device__ __forceinline__ uint8_t* FrameSpikeTokens(const Staging& st, const PageShape& shape, int page) {
  return FrameSpikeValues(st, shape, page) + 4 * static_cast<size_t>(shape.frame_spikes) * shape.channels;
}
// mu and sigma of chunk-channel i from its stored `bits`-bit end pair on f's grid; false (and mu = lo, sigma = 0)
// for a bad index.
__device__ __forceinline__ bool DecodeChunk(const uint8_t* ends, size_t i, int bits, const Frame& f, float& mu,
                                            float& sigma) {
  int ql, qh;
  const bool ok = EndPairFromIndex(ReadEndPair(ends, i, bits), f.grid_max, ql, qh);
  if (!ok) ql = qh = 0;
  ChunkCentreAndWidth(f, ql, qh, mu, sigma);
  return ok;
}
__device__ __forceinline__ float InverseSigma(float sigma) {
  if (!(sigma > 0.0f)) return 0.0f;
  float inv = __frcp_rn(sigma);  // 1.0f / sigma, correctly rounded
  return inv < 3.40282347e+38f ? inv : 3.40282347e+38f;
}
__device__ __forceinline__ float Reconstruct(float v, float mu, float sigma, float lo, float hi) {
  float prod = sigma * v;
  float y = mu + prod;
  return Clamp(y, lo, hi);
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
  if (g.layout == Layout::kNhd) {
    base = (static_cast<size_t>(b) * g.block_tokens + r) * channels;
  } else {
    base = static_cast<size_t>(b) * g.heads * g.block_tokens * g.head_dim + static_cast<size_t>(r) * g.head_dim;
  }
  return true;
}
__device__ __forceinline__ size_t ChannelOffset(const KvGeometry& g, size_t base, int c) {
  if (g.layout == Layout::kNhd) return base + c;
  const int h = c / g.head_dim;
  const int d = c - h * g.head_dim;
  return base + static_cast<size_t>(h) * g.block_tokens * g.head_dim + d;
}

// Two floats rounded to nearest-even into the 16-bit type T, first in the low half: one packed conversion
// (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32), rounding as FromFloat<T> does.
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&u, &h, 4);
  }
  return u;
}
// Packed 16-bit values clamped to [lo, hi], pair by pair (lo <= hi): min(max(v, lo), hi) in one instruction each.
// Rounding to nearest is monotone, so for lo <= hi, rounding Clamp(x, lo, hi) into T equals clamping the rounded x
// to the rounded lo and hi (all three cases: x inside the range, above it, below it); the sign of a zero may differ.
template <typename T>
__device__ __forceinline__ uint32_t ClampPair(uint32_t v, uint32_t lo, uint32_t hi) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "packed 16-bit values");
  using Pair = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
  Pair x, l, h;
  memcpy(&x, &v, 4);
  memcpy(&l, &lo, 4);
  memcpy(&h, &hi, 4);
  const Pair r = __hmin2(__hmax2(x, l), h);
  uint32_t u;
  memcpy(&u, &r, 4);
  return u;
}
// One 16-byte store (p 16-byte aligned), always as one instruction: a plain uint4 store at a run-time row offset
// was split by nvcc into four 4-byte stores (for 6 of the lynx decode's 8 rows: 4 sectors' worth of requests
// per 16 bytes).
__device__ __forceinline__ void StoreGlobal16(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// Stores VEC values (16-byte aligned when VEC > 1) as whole 16-byte words built in registers.
template <typename T, int VEC>
__device__ __forceinline__ void StoreVec(T* p, const float* v) {
  if constexpr (VEC == 1) {
    p[0] = FromFloat<T>(v[0]);
  } else if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int part = 0; part < VEC / 4; ++part) {
      StoreGlobal16(p + 4 * part, __float_as_uint(v[4 * part]), __float_as_uint(v[4 * part + 1]),
                    __float_as_uint(v[4 * part + 2]), __float_as_uint(v[4 * part + 3]));
    }
  } else {
    static_assert(sizeof(T) == 2 && VEC % 8 == 0, "16-byte words of 16-bit values");
#pragma unroll
    for (int part = 0; part < VEC / 8; ++part) {
      const float* w = v + 8 * part;
      StoreGlobal16(p + 8 * part, PackPair<T>(w[0], w[1]), PackPair<T>(w[2], w[3]), PackPair<T>(w[4], w[5]),
                    PackPair<T>(w[6], w[7]));
    }
  }
}

__device__ __forceinline__ void ReportNonFinite(DeviceStatus* st, int page, int tokens, int channels, int t, int c) {
  const unsigned long long i =
      (static_cast<unsigned long long>(page) * tokens + t) * static_cast<unsigned long long>(channels) + c;
  atomicMax(&st->non_finite_complement, ~i);
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

// A little-endian float from 4 bytes of a stream (no alignment needed).
__device__ __forceinline__ float ReadF32(const uint8_t* q) {
  return __uint_as_float(q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<unsigned>(q[3]) << 24));
}

// The frame spikes of channel c of `page` whose tokens lie in [t_lo, t_hi), written into `dst` over what the
// decode put there. The channel's list is checked up to the first bad entry (tokens increasing and inside the
// page, values finite; else kErrBadFrameSpike and nothing more of the channel is written). The scatter kernel
// calls it for whole pages, LynxTileDecodeKernel for its tile's tokens after its own stores.
template <typename OutT>
__device__ __forceinline__ void ScatterFrameSpikes(const Staging& in, const PageShape& shape, const KvGeometry& dst,
                                                   DeviceStatus* status, int page, int c, int t_lo, int t_hi) {
  const uint8_t* values = FrameSpikeValues(in, shape, page);
  const uint8_t* tokens_at = FrameSpikeTokens(in, shape, page);
  OutT* out = static_cast<OutT*>(dst.data);
  int last = -1;
  for (int j = 0; j < shape.frame_spikes; ++j) {
    const size_t s = static_cast<size_t>(j) * shape.channels + c;
    const int t = tokens_at[2 * s] | (tokens_at[2 * s + 1] << 8);
    const float v = ReadF32(values + 4 * s);
    if (t <= last || t >= shape.tokens || !isfinite(v)) {
      atomicOr(&status->errors, kErrBadFrameSpike);
      return;
    }
    last = t;
    size_t base;
    if (t >= t_lo && t < t_hi && RowBase(dst, shape.channels, page, t, base)) {
      out[ChannelOffset(dst, base, c)] = FromFloat<OutT>(v);
    }
  }
}

// Stores a float little-endian at q (no alignment needed).
__device__ __forceinline__ void StoreF32(uint8_t* q, float v) {
  const unsigned bits = __float_as_uint(v);
#pragma unroll
  for (int b = 0; b < 4; ++b) q[b] = static_cast<uint8_t>(bits >> (8 * b));
}
// StoreF32 at the start of a field whose 32-bit word may hold the end of fields other blocks OR in at the same
// time: the bytes in that first word are OR-ed into it (zeroed beforehand; a plain store would race with their
// atomicOr), the rest stored.
__device__ __forceinline__ void StoreF32AfterOredWord(uint8_t* q, float v) {
  const unsigned bits = __float_as_uint(v);
  const uintptr_t word = reinterpret_cast<uintptr_t>(q) & ~uintptr_t{3};
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(q + b);
    const unsigned byte = (bits >> (8 * b)) & 0xFFu;
    if ((at & ~uintptr_t{3}) == word) {
      atomicOr(reinterpret_cast<unsigned*>(word), byte << (8 * (at & 3)));
    } else {
      q[b] = static_cast<uint8_t>(byte);
    }
  }
}

// ---- Conditional-mean anchor tables ---------------------------------------------------------------------

// Entry j of a page's concatenated anchor tables (the partial stages' tables, 2^(known - 1) entries each) from its
// 256 code counts `hist` (sign:magnitude codes of the sampled values, lynx_math.h kAnchorSampleChannels):
// lynx_math.cc ConditionalMeanTable, the CPU's double operations in the CPU's order. `excl` (null: none): the
// page's [partial stage][code] counts of the exact-extremes rule's singles, left out of that stage's table
// (lynx_extremes.h ExcludeSingleExtremes). `full_values` and `anchor_fallback`: LynxDeviceTables'.
__device__ __forceinline__ float AnchorTableEntry(int j, const uint32_t* hist, const uint32_t* excl, int num_streams,
                                                  const int* stage_bits, int total_bits, const float* full_values,
                                                  const float* anchor_fallback) {
  int known = 0, first = 0, stage = 0;
  for (int s = 0; s + 1 < num_streams; ++s) {
    known += stage_bits[s];
    stage = s;
    if (j < first + (1 << (known - 1))) break;
    first += 1 << (known - 1);
  }
  const uint32_t* minus = excl != nullptr ? excl + 256 * stage : nullptr;
  const int h = j - first;
  const int unknown = total_bits - known;
  const int sign = 1 << (total_bits - 1);
  double sum = 0.0;
  unsigned long long n = 0;
  // Unrolled so that the loads and conversions of several codes are in flight: only the sum is a chain.
#pragma unroll 4
  for (int i = h << unknown; i < (h + 1) << unknown; ++i) {
    // 32 bits hold a code's count (a page has at most 2^26 values); a 32-bit conversion to double is the cheaper.
    uint32_t c = hist[i] + hist[i | sign];
    if (minus != nullptr) c -= minus[i] + minus[i | sign];
    sum += static_cast<double>(c) * static_cast<double>(full_values[i]);
    n += c;
  }
  return n == 0 ? anchor_fallback[j] : static_cast<float>(sum / static_cast<double>(n));
}

// ---- Launch plumbing -------------------------------------------------------------------------------------

// A launch's error `e` as a Status naming `kernel` (OK for cudaSuccess; codes as cuda_util.h CudaErrorStatus
// gives them); LaunchError: the last one's.
absl::Status LaunchStatus(const char* kernel, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  return CudaErrorStatus(e, absl::StrCat("launch of ", kernel).c_str());
}
absl::Status LaunchError(const char* kernel) { return LaunchStatus(kernel, cudaGetLastError()); }

// The CUDA element type of a DType, as a tag: ForDType(dtype, f) calls f(TypeTag<T>{}) with T = float,
// __nv_bfloat16 or __half and returns what f returns (INTERNAL for a DType it does not know).
template <typename T>
struct TypeTag {
  using type = T;
};
template <typename F>
absl::Status ForDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(TypeTag<float>{});
    case DType::kBfloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case DType::kFloat16:
      return f(TypeTag<__half>{});
  }
  return absl::InternalError("unknown dtype");
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace
}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_CODEC_KERNELS_COMMON_CUH_
