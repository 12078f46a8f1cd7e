// CUDA decode kernels of every codec scheme into paged KV layouts (codec_kernels.h). Compiled with --fmad=false;
// the shared device pieces are in codec_kernels_common.cuh and codec_decode_common.cuh, the encode side in
// codec_encode_kernels.cu. DecodeKernel takes every scheme and shape; lynx in the common shape (8-channel vectors,
// chunks and destination blocks of whole 8-token runs) goes to LynxTileDecodeKernel (codec_lynx_tile_decode.cu),
// which does per token nothing but the arithmetic.
#include "codec/gpu/codec_decode_common.cuh"

namespace kvt::codec::gpu::internal {
namespace {

// ---- Decode ----------------------------------------------------------------------------------------------

enum class Kind { kBf16, kUniform, kFp8, kLynx };

// Where a thread's chunk parameters come from: derived per token from the metadata (chunks under 16 tokens),
// from the block's shared table per token, or from it once (every chunk a whole number of the thread's 8
// tokens, so they share one chunk).
enum class Params { kPerToken, kShared, kSharedOnce };

// Block (channel group of 16 * VEC, token tile of 128, page); thread (vector j, slice s) decodes channels
// [c, c + VEC) of 8 consecutive tokens. Lynx and uniform with VEC == 8 first issue every load a thread needs for
// itself (its codes, its destination block ids), then build the block's tables, so that the loads' latency
// overlaps that work.
template <typename OutT, int VEC, Kind kKind, Params kParams>
__global__ void __launch_bounds__(kThreads, kParams == Params::kSharedOnce ? kDecodeOnceMinBlocks : kDecodeMinBlocks)
    DecodeKernel(const DecodeParams p, const LynxDeviceTables* __restrict__ tables) {
  constexpr int kGroupChannels = kDecodeVecThreads * VEC;
  constexpr bool kChunked = kKind == Kind::kLynx || kKind == Kind::kUniform;
  constexpr bool shared_params = kChunked && kParams != Params::kPerToken;
  __shared__ float s_table[256];  // lynx: decode table; fp8: e4m3 values
  // The tile's chunk parameters, computed once per (chunk, channel) by the block: lynx (mu, sigma),
  // uniform (min, scale). Used when the tile spans at most kDecodeMaxTileChunks chunks.
  __shared__ __align__(16) float s_p0[kChunked ? kDecodeMaxTileChunks : 1][kGroupChannels];
  __shared__ __align__(16) float s_p1[kChunked ? kDecodeMaxTileChunks : 1][kGroupChannels];
  __shared__ __align__(16) float s_lo[kKind == Kind::kLynx ? kGroupChannels : 1];
  __shared__ __align__(16) float s_hi[kKind == Kind::kLynx ? kGroupChannels : 1];
  const int tid = threadIdx.x;
  const int page = blockIdx.z;
  const int tokens = p.shape.tokens;
  const int channels = p.shape.channels;
  const int cg0 = blockIdx.x * kGroupChannels;
  const int c = cg0 + (tid % kDecodeVecThreads) * VEC;
  const int t_tile = blockIdx.y * kDecodeTileTokens;
  const int t_first = t_tile + (tid / kDecodeVecThreads) * kDecodeTokensPerThread;
  const int32_t* page_ids = p.dst.block_ids + static_cast<size_t>(page) * p.dst.blocks_per_page;

  // Lynx and uniform, 8 channels per thread: every stream's fields of the thread's 8 tokens (independent loads,
  // all in flight together), merged into one code prefix byte per value, and the first token's destination block.
  constexpr bool kPrefetch = kChunked && VEC == 8;
  unsigned long long pre[kPrefetch ? kDecodeTokensPerThread : 1];
  const int first_bj = t_first / p.dst.block_tokens;
  int first_block = 0;  // the destination block of the thread's first token (kPrefetch)
  if constexpr (kPrefetch) {
#pragma unroll
    for (int i = 0; i < kDecodeTokensPerThread; ++i) pre[i] = 0;
    if (c < channels) {
      if (t_first < tokens) first_block = page_ids[first_bj];
      // Octets (8 values) of the page before the thread's first row, and per row (channels % 8 == 0 here).
      const unsigned octet0 = (static_cast<unsigned>(t_first) * channels + c) >> 3;
      const unsigned row_octets = static_cast<unsigned>(channels) >> 3;
      const int rows = min(kDecodeTokensPerThread, tokens - t_first);
      MergeStages(p, page, octet0, row_octets, rows, pre);
    }
  }

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
    s_table[tid] = numerics::E4m3IsNan(tid) ? 0.0f : numerics::E4m3ToFloat(tid);
  }

  const uint8_t* meta = p.in.meta + page * p.in.meta_stride;
  const size_t chunk_values = static_cast<size_t>(p.shape.num_chunks) * channels;
  OutT* dst = static_cast<OutT*>(p.dst.data);
  const int k_first = t_tile / p.shape.chunk_len;
  const int tile_chunks = (min(t_tile + kDecodeTileTokens, tokens) - 1) / p.shape.chunk_len - k_first + 1;
  // The launcher picks shared parameters only when every tile spans at most kDecodeMaxTileChunks chunks.
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
        const Frame f = MakeChannelFrame(l, h, p.shape.grid_max);
        float mu, sigma;
        if (!DecodeChunk(meta + p.in.ends_offset, mi, p.shape.end_pair_bits, f, mu, sigma)) atomicOr(&p.status->errors, kErrBadChunkEnds);
        s_p0[kk][cc] = mu;
        s_p1[kk][cc] = sigma;
      } else if constexpr (kKind == Kind::kUniform) {
        const uint16_t m16 = reinterpret_cast<const uint16_t*>(meta)[mi];
        const uint16_t s16 = reinterpret_cast<const uint16_t*>(meta)[chunk_values + mi];
        if (((m16 >> 10) & 0x1F) == 0x1F || ((s16 >> 10) & 0x1F) == 0x1F) atomicOr(&p.status->errors, kErrBadFp16Meta);
        s_p0[kk][cc] = numerics::F16ToFloat(m16);
        s_p1[kk][cc] = numerics::F16ToFloat(s16);
      }
    }
  }
  __syncthreads();
  if (c >= channels) return;

  // Per token: the lynx range (lo, hi) and the chunk's (p0, p1) of the thread's channels.
  float lo[VEC], hi[VEC], p0[VEC], p1[VEC];
  auto load_shared_params = [&](int k) {
    const int kk = k - k_first;
    LoadShared<VEC>(&s_p0[kk][c - cg0], p0);
    LoadShared<VEC>(&s_p1[kk][c - cg0], p1);
    if constexpr (kKind == Kind::kLynx) {
      LoadShared<VEC>(&s_lo[c - cg0], lo);
      LoadShared<VEC>(&s_hi[c - cg0], hi);
    }
  };
  if constexpr (shared_params && kParams == Params::kSharedOnce) load_shared_params(t_first / p.shape.chunk_len);
  // Cursors over the thread's consecutive tokens: chunk and block advance without a division per token.
  int kc = t_first / p.shape.chunk_len, kr = t_first - kc * p.shape.chunk_len;
  int bj = first_bj, br = t_first - bj * p.dst.block_tokens;
  const size_t coff = ChannelOffset(p.dst, 0, c);
  const bool nhd = p.dst.layout == Layout::kNhd;
  auto row_base = [&](int b, int row) -> size_t {
    return nhd ? (static_cast<size_t>(b) * p.dst.block_tokens + row) * channels
               : static_cast<size_t>(b) * p.dst.heads * p.dst.block_tokens * p.dst.head_dim +
                     static_cast<size_t>(row) * p.dst.head_dim;
  };
  // kPrefetch with blocks of a multiple of 8 tokens: the thread's tokens are consecutive rows of first_block.
  const bool one_block = kPrefetch && p.dst.block_tokens % kDecodeTokensPerThread == 0;
  const bool first_ok = first_block >= 0 && first_block < p.dst.num_blocks;
  OutT* const first_row = dst + (one_block && first_ok ? row_base(first_block, br) : 0) + coff;
  const size_t row_stride = nhd ? channels : p.dst.head_dim;
#pragma unroll
  for (int i = 0; i < kDecodeTokensPerThread; ++i) {
    const int t = t_first + i;
    if (t >= tokens) continue;
    const int k = kc;
    const int row_block = bj, row = br;
    if (++kr == p.shape.chunk_len) kr = 0, ++kc;
    if (++br == p.dst.block_tokens) br = 0, ++bj;
    if constexpr (shared_params && kParams == Params::kShared) {
      load_shared_params(k);
    } else if constexpr (kChunked && !shared_params) {  // chunks shorter than 16 tokens: each thread derives its own
      const size_t mi = static_cast<size_t>(k) * channels + c;
      if constexpr (kKind == Kind::kLynx) {
        bool bad = false, bad_ends = false;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          lo[e] = reinterpret_cast<const float*>(meta)[c + e];
          hi[e] = reinterpret_cast<const float*>(meta)[channels + c + e];
          if (!isfinite(lo[e]) || !isfinite(hi[e]) || !(lo[e] <= hi[e])) bad = true;
          const Frame f = MakeChannelFrame(lo[e], hi[e], p.shape.grid_max);
          if (!DecodeChunk(meta + p.in.ends_offset, mi + e, p.shape.end_pair_bits, f, p0[e], p1[e])) bad_ends = true;
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
          p0[e] = numerics::F16ToFloat(m16);
          p1[e] = numerics::F16ToFloat(s16);
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
          // Reconstruct (lynx_math.h) with its clamp as max / min: equal up to the sign of a zero.
          y[e] = fminf(fmaxf(p0[e] + p1[e] * s_table[prefix[e]], lo[e]), hi[e]);
        } else {
          const float prod = static_cast<float>(prefix[e]) * p1[e];
          y[e] = p0[e] + prod;
        }
      }
    } else if constexpr (kKind == Kind::kFp8) {
      const int groups = (channels + 127) / 128;
      const float scale = reinterpret_cast<const float*>(meta)[static_cast<size_t>(t) * groups + c / 128];
      bool bad = !isfinite(scale) || !(scale >= 0.0f) || !isfinite(scale * numerics::kE4m3Max);
      if (bad) atomicOr(&p.status->errors, kErrBadFp8Scale);
      const uint8_t* codes = p.in.codes[0] + page * p.in.codes_stride[0];
      bool nan_code = false;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const uint32_t code = codes[idx + e];
        nan_code |= numerics::E4m3IsNan(code);
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
    OutT* out;
    if (one_block) {
      if (!first_ok) {
        atomicOr(&p.status->errors, kErrBadBlockId);
        continue;
      }
      out = first_row + i * row_stride;
    } else {
      const int b = kPrefetch && row_block == first_bj ? first_block : page_ids[row_block];
      if (b < 0 || b >= p.dst.num_blocks) {
        atomicOr(&p.status->errors, kErrBadBlockId);
        continue;
      }
      out = dst + row_base(b, row) + coff;
    }
    if constexpr (VEC == 1) {
      *out = FromFloat<OutT>(y[0]);
    } else {
      StoreVec<OutT, VEC>(out, y);
    }
  }
}

template <typename OutT, Kind kKind>
absl::Status LaunchDecodeKind(const DecodeParams& p, const LynxDeviceTables* tb, cudaStream_t stream) {
  const bool vec = p.shape.channels % 8 == 0 && p.dst.head_dim % 8 == 0 && Aligned16(p.dst.data);
  const dim3 tiles(0, (p.shape.tokens + kDecodeTileTokens - 1) / kDecodeTileTokens, p.shape.num_pages);
  // Tiles of 128 tokens span at most 128 / 16 + 1 chunks of >= 16 tokens: their parameters fit shared memory.
  // Chunks of a whole number of a thread's tokens: one chunk per thread.
  const bool once = p.shape.chunk_len >= 16 && p.shape.chunk_len % kDecodeTokensPerThread == 0;
  const bool shared = p.shape.chunk_len >= 16;
  static_assert(kDecodeTileTokens / 16 + 1 <= kDecodeMaxTileChunks, "tile chunk bound");
  if (kKind == Kind::kLynx && LynxTileDecodeFits(p)) return LaunchLynxTileDecode(p, tb, stream);
  if (vec) {
    const dim3 grid((p.shape.channels + 8 * kDecodeVecThreads - 1) / (8 * kDecodeVecThreads), tiles.y, tiles.z);
    if (once) {
      DecodeKernel<OutT, 8, kKind, Params::kSharedOnce><<<grid, kThreads, 0, stream>>>(p, tb);
    } else if (shared) {
      DecodeKernel<OutT, 8, kKind, Params::kShared><<<grid, kThreads, 0, stream>>>(p, tb);
    } else {
      DecodeKernel<OutT, 8, kKind, Params::kPerToken><<<grid, kThreads, 0, stream>>>(p, tb);
    }
  } else {
    const dim3 grid((p.shape.channels + kDecodeVecThreads - 1) / kDecodeVecThreads, tiles.y, tiles.z);
    if (shared) {
      DecodeKernel<OutT, 1, kKind, Params::kShared><<<grid, kThreads, 0, stream>>>(p, tb);
    } else {
      DecodeKernel<OutT, 1, kKind, Params::kPerToken><<<grid, kThreads, 0, stream>>>(p, tb);
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

absl::Status LaunchDecode(const Scheme& scheme, int stages, bool exact_extremes, const LynxDeviceTables* tables,
                          const Staging& in, const PageShape& shape, const KvGeometry& dst, DeviceStatus* status,
                          void* stream_handle) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  DecodeParams p;
  p.in = in;
  p.shape = shape;
  p.dst = dst;
  p.status = status;
  p.chunk_div = FastDivisor::For(shape.chunk_len);
  p.block_div = FastDivisor::For(dst.block_tokens);
  p.stages = stages;
  p.total_bits = 0;
  for (int i = 0; i < kMaxStreams; ++i) p.stage_bits[i] = i < scheme.num_streams() ? scheme.stage_bits[i] : 0;
  for (int i = 0; i < scheme.num_streams(); ++i) p.total_bits += scheme.stage_bits[i];
  const LynxDeviceTables* tb = tables;
  if ((scheme.kind == SchemeKind::kLynx) != (tb != nullptr)) {
    return absl::InternalError("lynx launches need device tables, other schemes none");
  }
  const bool extremes = exact_extremes && scheme.kind == SchemeKind::kLynx && stages < scheme.num_streams();
  // The tile kernel applies the rule as it writes when each chunk lies in one tile (it counts a tile's values
  // only); the other kernels and shapes get the separate pass after them.
  const bool fused = extremes && LynxTileDecodeFits(p) && kDecodeTileTokens % shape.chunk_len == 0;
  p.exact_extremes = fused ? 1 : 0;
  // The spikes go last, over whatever the codes (and the rule) put in their places: inside the tile kernel's blocks
  // when no rule pass follows it, else by their own kernel after everything.
  const bool spikes = scheme.kind == SchemeKind::kLynx && shape.frame_spikes > 0;
  const bool spikes_in_tiles = spikes && LynxTileDecodeFits(p) && !(extremes && !fused);
  p.frame_spikes_in_tiles = spikes_in_tiles ? 1 : 0;
  const absl::Status st = ForDType(dst.dtype, [&](auto tag) {
    return LaunchDecodeTyped<typename decltype(tag)::type>(scheme.kind, p, tb, stream);
  });
  if (!st.ok()) return st;
  if (extremes && !fused) {
    const absl::Status rule = LaunchExactExtremes(scheme, stages, tables, in, shape, dst, stream_handle);
    if (!rule.ok()) return rule;
  }
  if (spikes && !spikes_in_tiles) return LaunchFrameSpikeScatter(in, shape, dst, status, stream_handle);
  return absl::OkStatus();
}

}  // namespace kvt::codec::gpu::internal
