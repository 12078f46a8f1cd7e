// CUDA kernels of every codec scheme (codec_kernels.h). Each kernel performs, per value, exactly the float
// operations of the scalar reference (codec/internal/lynx_math.h, lynx_kernels_ref.cc, baselines.cc) in the same
// order, and the small float formats are numerics/'s own functions, the reference's too; this file is compiled with --fmad=false so nothing is contracted.
// Minima, maxima and clamps use the reference's own compare-and-select forms (the sign of a zero can reach the
// int8/int4 metadata); the fp8 group maximum, std::fmax in the reference, is RefFmax (glibc: first operand on
// ties).
//
// Encode (lynx, int8, int4): one block per (page, group of 32 channels). The page's tile of that group is
// loaded once with 16-byte loads into shared memory as it is (pages up to 256 tokens, or 2048 of 16-bit input
// where the device's shared memory allows; longer pages are read from global memory for each pass; with the
// default frame spikes the block selects them from its tile), per-channel range and per-chunk statistics are
// computed by one thread per (chunk, channel), then each thread codes 8 consecutive channels of a row, whose
// fields fill whole bytes of every stream (one store per stream). With channels % 8 != 0 a warp codes a row (a lane per channel) and packs
// the fields with shuffles into 32-bit words (atomicOr only on words shared with a neighbouring group).
// The magnitude code comes from lynx_math.h's bucket table (one threshold compare) or, for tables that need more
// corrections, a log guess corrected against the thresholds; the tables are read from device memory.
// Decode: one block per (page, 128 channels, 128 tokens); the block derives each chunk's (mu, sigma) once into
// shared memory, then a thread decodes 8 channels of 8 consecutive tokens, reading each stream's fields with
// one aligned load per token and writing the output dtype with 16-byte stores.
// This file holds the encode kernels and LaunchEncode, which hands the common lynx shape to the tile encoder
// (codec_lynx_tile_encode.cu); decode is in codec_decode_kernels.cu, what all share in codec_kernels_common.cuh.
#include "codec/gpu/codec_frame_spike_select.cuh"
#include "codec/gpu/codec_kernels_common.cuh"

#include <atomic>
#include <type_traits>

namespace kvt::codec::gpu::internal {
namespace {

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

// Dynamic shared memory of a staged group encode: the tile [tokens][kGroup] of the input's own elements (copied
// as they are: 16-bit input takes half the room of floats, so pages of up to kMaxStagedTokens16 tokens fit), then
// each row's element offset.
template <typename T>
constexpr size_t StagedTileBytes(int tokens) {
  return (static_cast<size_t>(tokens) * kGroup * sizeof(T) + 15) / 16 * 16;
}
template <typename T>
constexpr size_t StagedSharedBytes(int tokens) {
  return StagedTileBytes<T>(tokens) + static_cast<size_t>(tokens) * sizeof(long long);
}

// kSelectKeep > 0 (staged lynx pages with kSelectKeep - 1 frame spikes): the block selects its channels' frame
// spikes itself, from the staged tile (SelectFrameSpikes), where otherwise LaunchFrameSpikeSelect's kernel reads
// the whole page from global memory once more before this one.
template <typename T, int VEC, bool kLynx, bool kStaged, bool kOctets, int kSelectKeep>
__global__ void __launch_bounds__(kThreads)
    EncodeGroupKernel(const EncodeParams p, const LynxDeviceTables* __restrict__ tables) {
  static_assert(kSelectKeep == 0 || (kLynx && kStaged), "in-block selection reads the staged tile");
  static_assert(kSelectWarps * 32 == kThreads && kGroup == 32, "SelectFrameSpikes' block: a lane per channel");
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  T* const tile = reinterpret_cast<T*>(staged_bytes);  // [tokens][kGroup] when kStaged
  long long* const s_row = reinterpret_cast<long long*>(staged_bytes + StagedTileBytes<T>(p.shape.tokens));
  __shared__ float s_thr[128 + kMaxDeviceCorrections];
  __shared__ __align__(16) uint8_t s_bucket[kLynx ? kMaxDeviceBuckets + 16 : 16];
  __shared__ unsigned s_hist[256];  // multi-stream lynx: this block's code counts
  __shared__ Frame s_frame[kGroup];
  __shared__ float s_red_lo[kRounds][kGroup];
  __shared__ float s_red_hi[kRounds][kGroup];
  __shared__ __align__(16) float s_p0[kRounds][kGroup];  // lynx: mu; uniform: min
  __shared__ __align__(16) float s_p1[kRounds][kGroup];  // lynx: 1 / sigma (InverseSigma); uniform: scale
  // Lynx frame spikes of the block's channels (from LaunchFrameSpikeSelect's kernel, or this block's selection):
  // each spike's token (-1: none) and the value coded in its place.
  __shared__ int s_ftok[kLynx ? kMaxFrameSpikes : 1][kGroup];
  __shared__ float s_fsub[kLynx ? kMaxFrameSpikes : 1][kGroup];

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

  const int spikes = kLynx ? p.shape.frame_spikes : 0;
  // The selection's spikes of the block's channels into s_ftok / s_fsub (the selection wrote them to global
  // memory: the kernel before this one, or this block).
  auto read_spikes = [&] {
    if constexpr (kLynx) {
      const uint8_t* tokens_at = FrameSpikeTokens(p.out, p.shape, page);
      for (int i = tid; i < spikes * kGroup; i += kThreads) {
        const int j = i / kGroup, c = i % kGroup;
        const size_t s = static_cast<size_t>(j) * channels + c0 + c;
        const int t = c < nvalid ? (tokens_at[2 * s] | (tokens_at[2 * s + 1] << 8)) : -1;
        s_ftok[j][c] = t < tokens ? t : -1;  // a selection that failed left tokens past the page
        s_fsub[j][c] = c < nvalid ? p.out.frame_sub[static_cast<size_t>(page) * spikes * channels + s] : 0.0f;
      }
    }
  };
  if constexpr (kSelectKeep == 0) read_spikes();
  // Value (t, c0 + c) from global memory, a frame spike's replacement in its place; 0 (and an error) for a bad
  // block id.
  auto load_global = [&](int t, int c) -> float {
    size_t base;
    if (!RowBase(p.src, channels, page, t, base)) {
      atomicOr(&p.status->errors, kErrBadBlockId);
      return 0.0f;
    }
    float x = ToFloat<T>(src[ChannelOffset(p.src, base, c0 + c)]);
    for (int j = 0; j < spikes; ++j) x = s_ftok[j][c] == t && isfinite(s_fsub[j][c]) ? s_fsub[j][c] : x;
    return x;
  };
  if (kSelectKeep == 0 && spikes > 0) __syncthreads();
  if constexpr (kStaged) {
    // Row offsets first (one block-id lookup and division per token; s_row[t]: the element offset of row t, or
    // -1 for a bad block id), then the tile: thread tid always loads the same VEC channels, of rows
    // tid / kPerRow + u * kRowsPerPass, so no division per vector. A 16-bit tile takes the input's bytes as
    // they are.
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
    // A copy unit: 16 bytes (VEC elements) where the rows allow vector loads, else one element.
    using Unit = std::conditional_t<(VEC > 1), uint4, T>;
    static_assert(sizeof(Unit) == VEC * sizeof(T), "a unit is VEC elements");
    for (int t0 = tid / kPerRow; t0 < tokens; t0 += kRowsPerPass * kBatch) {
      Unit v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int t = t0 + u * kRowsPerPass;
        const long long base = active && t < tokens ? s_row[t] : -2;
        if (base >= 0) {
          const T* at = src + static_cast<size_t>(base) + coff;
          if constexpr (VEC > 1) {
            v[u] = __ldg(reinterpret_cast<const uint4*>(at));  // the read-only data path
          } else {
            v[u] = *at;
          }
        } else {
          if (base == -1) atomicOr(&p.status->errors, kErrBadBlockId);
          if constexpr (VEC > 1) {
            v[u] = make_uint4(0, 0, 0, 0);
          } else {
            v[u] = FromFloat<T>(0.0f);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int t = t0 + u * kRowsPerPass;
        if (active && t < tokens) *reinterpret_cast<Unit*>(&tile[t * kGroup + j * VEC]) = v[u];
      }
    }
    if constexpr (kSelectKeep > 0) {
      // The block's channels' frame spikes, from the tile (rows of bad block ids are skipped, as the selection
      // kernel skips them; the staging above reported them).
      __syncthreads();
      const auto load_tile = [&](int t, float& x) -> bool {
        if (s_row[t] < 0) return false;
        x = ToFloat<T>(tile[t * kGroup + lane]);
        return true;
      };
      SelectFrameSpikes<kSelectKeep>(load_tile, p.shape, p.out, p.status, page, c0 + lane);
      __syncthreads();  // makes the block's global writes visible to the whole block
      read_spikes();
    }
    if (spikes > 0) {  // each frame spike's replacement into its place in the tile (a value of the page: exact)
      __syncthreads();
      for (int i = tid; i < spikes * kGroup; i += kThreads) {
        const int j = i / kGroup, c = i % kGroup;
        // A non-finite replacement is left out: the encode fails on it where it lies, and the error must name
        // that place, not the spike's.
        if (s_ftok[j][c] >= 0 && isfinite(s_fsub[j][c])) {
          tile[s_ftok[j][c] * kGroup + c] = FromFloat<T>(s_fsub[j][c]);
        }
      }
    }
  }
  __syncthreads();
  auto value = [&](int t, int c) -> float {
    if constexpr (kStaged) {
      return ToFloat<T>(tile[t * kGroup + c]);
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
      s_frame[tid] = MakeChannelFrame(lo, hi, p.shape.grid_max);
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
          // The end_pair_bits field of chunk-channel i, ORed into the zeroed 32-bit words it spans (shared with
          // the neighbouring fields, some written by other blocks).
          const unsigned index = static_cast<unsigned>(qh) * static_cast<unsigned>(qh + 1) / 2 + static_cast<unsigned>(ql);
          const size_t bit = i * p.shape.end_pair_bits;
          unsigned* words = reinterpret_cast<unsigned*>(meta + p.out.ends_offset) + bit / 32;
          const unsigned long long v = static_cast<unsigned long long>(index) << (bit % 32);
          atomicOr(&words[0], static_cast<unsigned>(v));
          if (v >> 32) atomicOr(&words[1], static_cast<unsigned>(v >> 32));
          s_p0[kl][c] = mu;
          s_p1[kl][c] = InverseSigma(sigma);
        } else {
          const uint16_t m16 = numerics::FloatToF16(cmin, numerics::F16Round::kDown);
          const float m = numerics::F16ToFloat(m16);
          const float span = cmax - m;
          const float want = span / qmax;
          const uint16_t s16 = numerics::FloatToF16(want, numerics::F16Round::kUp);
          reinterpret_cast<uint16_t*>(meta)[i] = m16;
          reinterpret_cast<uint16_t*>(meta)[chunk_values + i] = s16;
          s_p0[kl][c] = m;
          s_p1[kl][c] = numerics::F16ToFloat(s16);
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
          if constexpr (kStaged && std::is_same_v<T, float>) {
            const float4* tp = reinterpret_cast<const float4*>(&tile[t * kGroup + c]);
            const float4 u = tp[0], v = tp[1];
            x[0] = u.x, x[1] = u.y, x[2] = u.z, x[3] = u.w, x[4] = v.x, x[5] = v.y, x[6] = v.z, x[7] = v.w;
          } else if constexpr (kStaged) {  // 8 16-bit elements in one 16-byte load
            const uint4 u = *reinterpret_cast<const uint4*>(&tile[t * kGroup + c]);
            const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
            for (int i = 0; i < 8; ++i) x[i] = ToFloat<T>(e[i]);
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
            for (int e = 0; e < 8; ++e) {
              if (c0 + c + e < kAnchorSampleChannels) atomicAdd(&s_hist[code[e]], 1u);
            }
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
        if (kLynx && p.out.histogram != nullptr && lane < nvalid && c0 + lane < kAnchorSampleChannels &&
            t % kAnchorSampleStride == 0) {
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

// Multi-stream lynx: the page's conditional-mean anchor tables from its code histogram; thread j computes entry
// j. One block per page.
__global__ void __launch_bounds__(128) AnchorTableKernel(const EncodeParams p, const LynxDeviceTables* __restrict__ tables) {
  const int page = blockIdx.x;
  const int j = threadIdx.x;
  if (j >= p.out.table_floats) return;
  const uint32_t* excl =
      p.out.exclusions != nullptr ? p.out.exclusions + static_cast<size_t>(page) * 256 * (p.num_streams - 1) : nullptr;
  const float v = AnchorTableEntry(j, p.out.histogram + static_cast<size_t>(page) * 256, excl, p.num_streams,
                                   p.stage_bits, p.total_bits, tables->full_values,
                                   tables->anchor_fallback);
  StoreF32(p.out.meta + page * p.out.meta_stride + p.out.tables_offset + 4 * static_cast<size_t>(j), v);
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
    for (int c = lane; c < channels; c += 32) out[c] = numerics::FloatToBf16(load(c));
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
      const float scale = amax / numerics::kE4m3Max;
      if (lane == 0) reinterpret_cast<float*>(meta)[static_cast<size_t>(t) * groups + g] = scale;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = g * 128 + 32 * j + lane;
        if (c < channels) {
          const float y = scale > 0.0f ? x[j] / scale : 0.0f;
          codes[row + c] = numerics::FloatToE4m3(y);
        }
      }
    }
  }
}

// Whether the current device gives a block the dynamic shared memory of a kMaxStagedTokens16-token 16-bit tile
// beside the most static shared memory a kernel can have (48 KiB): H100 and H200 (227 KiB) do; a device that
// does not stages no 16-bit pages longer than kMaxStagedTokens. Asked once per device.
bool DeviceFitsLongTiles() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // 0: not asked yet; 1: fits; 2: does not
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return false;
  int v = known[device].load(std::memory_order_relaxed);
  if (v == 0) {
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      return false;  // asked again next time
    }
    v = static_cast<size_t>(optin) >= StagedSharedBytes<__half>(kMaxStagedTokens16) + 48 * 1024 ? 1 : 2;
    known[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// The most dynamic shared memory a staged launch on the current device asks for, which each staged instance is
// opted into (one value for every launch, so that concurrent launches of pages of different lengths cannot change
// it under each other).
size_t MaxStagedSharedBytes(bool sixteen_bit) {
  if (!sixteen_bit) return StagedSharedBytes<float>(kMaxStagedTokens);
  return StagedSharedBytes<__half>(DeviceFitsLongTiles() ? kMaxStagedTokens16 : kMaxStagedTokens);
}

// Whether a group encode of `shape` stages its page tile in shared memory: pages of up to kMaxStagedTokens
// tokens, or kMaxStagedTokens16 of 16-bit input where the device allows.
bool GroupEncodeStages(bool sixteen_bit, const PageShape& shape) {
  if (shape.tokens <= kMaxStagedTokens) return true;
  return sixteen_bit && shape.tokens <= kMaxStagedTokens16 && DeviceFitsLongTiles();
}

// Whether a lynx group encode selects its frame spikes in its own blocks (else LaunchFrameSpikeSelect's kernel
// runs before it): staged pages with the default spike count. LaunchGroupEncode and LaunchEncode both ask this.
bool GroupEncodeSelectsSpikes(bool sixteen_bit, const PageShape& shape) {
  return shape.frame_spikes == kInBlockFrameSpikes && GroupEncodeStages(sixteen_bit, shape);
}

template <typename T, int VEC, bool kLynx, bool kStaged, bool kOctets, int kSelectKeep>
absl::Status LaunchGroupKernel(const EncodeParams& p, const LynxDeviceTables* tb, cudaStream_t stream) {
  const dim3 grid((p.shape.channels + kGroup - 1) / kGroup, p.shape.num_pages);
  const size_t smem = kStaged ? StagedSharedBytes<T>(p.shape.tokens) : 0;
  auto* kernel = EncodeGroupKernel<T, VEC, kLynx, kStaged, kOctets, kSelectKeep>;
  if constexpr (kStaged) {
    // Static + dynamic past 48 KiB needs the opt-in; set on every launch, as it is per device, to one value for
    // the instance (MaxStagedSharedBytes).
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(MaxStagedSharedBytes(sizeof(T) == 2)));
    if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaFuncSetAttribute: ", cudaGetErrorName(e)));
  }
  kernel<<<grid, kThreads, smem, stream>>>(p, tb);
  return LaunchError(kLynx ? "EncodeGroupKernel<lynx>" : "EncodeGroupKernel<uniform>");
}

template <typename T, int VEC, bool kLynx>
absl::Status LaunchGroupEncode(const EncodeParams& p, const LynxDeviceTables* tb, cudaStream_t stream) {
  const bool octets = p.shape.channels % 8 == 0;
  if (GroupEncodeStages(sizeof(T) == 2, p.shape)) {
    if (kLynx && GroupEncodeSelectsSpikes(sizeof(T) == 2, p.shape)) {
      constexpr int kKeep = kLynx ? kInBlockFrameSpikes + 1 : 0;
      return octets ? LaunchGroupKernel<T, VEC, kLynx, true, true, kKeep>(p, tb, stream)
                    : LaunchGroupKernel<T, VEC, kLynx, true, false, kKeep>(p, tb, stream);
    }
    return octets ? LaunchGroupKernel<T, VEC, kLynx, true, true, 0>(p, tb, stream)
                  : LaunchGroupKernel<T, VEC, kLynx, true, false, 0>(p, tb, stream);
  }
  return octets ? LaunchGroupKernel<T, VEC, kLynx, false, true, 0>(p, tb, stream)
                : LaunchGroupKernel<T, VEC, kLynx, false, false, 0>(p, tb, stream);
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

}  // namespace

absl::Status LaunchEncode(const Scheme& scheme, bool centering_mean, bool exact_extremes,
                          const LynxDeviceTables* tables, const LynxDeviceTables* host_tables, const KvGeometry& src,
                          const PageShape& shape, const Staging& out, DeviceStatus* status, void* stream_handle) {
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
  if (LynxTileEncodeFits(scheme, centering_mean, exact_extremes, src, shape, out)) {
    if (tables == nullptr || host_tables == nullptr) return absl::InternalError("lynx launches need tables");
    return LaunchLynxTileEncode(scheme, exact_extremes, tables, *host_tables, src, shape, out, status, stream_handle);
  }
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
    if (shape.frame_spikes > 0 && !GroupEncodeSelectsSpikes(src.dtype != DType::kFloat32, shape)) {
      const absl::Status selected = LaunchFrameSpikeSelect(src, shape, out, status, stream_handle);
      if (!selected.ok()) return selected;
    }
  }
  const absl::Status st = ForDType(src.dtype, [&](auto tag) {
    return LaunchEncodeTyped<typename decltype(tag)::type>(scheme.kind, p, tb, stream);
  });
  if (!st.ok() || scheme.kind != SchemeKind::kLynx || p.num_streams == 1) return st;
  if (exact_extremes) {
    const absl::Status excluded = LaunchExcludeSingleExtremes(scheme, p.out, shape, stream_handle);
    if (!excluded.ok()) return excluded;
  } else {
    p.out.exclusions = nullptr;  // the tables count every sampled value
  }
  AnchorTableKernel<<<shape.num_pages, 128, 0, stream>>>(p, tb);
  return LaunchError("AnchorTableKernel");
}

}  // namespace kvt::codec::gpu::internal
