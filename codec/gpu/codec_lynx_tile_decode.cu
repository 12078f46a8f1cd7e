// The lynx tile decoder (codec_decode_common.cuh LynxTileDecodeFits / LaunchLynxTileDecode): LaunchDecode's fast
// path for lynx in the common shape (8-channel vectors, chunks and destination blocks of whole 8-token runs), which
// does per token nothing but the arithmetic; DecodeKernel (codec_decode_kernels.cu) takes every other scheme and
// shape. Its decodes equal the CPU decode's rounded once into the output type; compiled with --fmad=false.
#include "codec/gpu/codec_decode_common.cuh"

namespace kvt::codec::gpu::internal {
namespace {

// kTwo4: a row's code prefixes from its anchor and residual words (nibble e of each: value e), the even values'
// codes in bytes 0-3 and the odd ones' in bytes 4-7 (ValueOfByte), stream 0's nibble above stream 1's.
__device__ __forceinline__ unsigned long long Two4Prefixes(uint32_t anchor, uint32_t resid) {
  const uint32_t even = ((anchor << 4) & 0xF0F0F0F0u) | (resid & 0x0F0F0F0Fu);
  const uint32_t odd = (anchor & 0xF0F0F0F0u) | ((resid >> 4) & 0x0F0F0F0Fu);
  return even | (static_cast<unsigned long long>(odd) << 32);
}

// A thread's clamp to its 8 channels' page-channel ranges [lo, hi] (Reconstruct's clamp, lynx_math.h), applied as
// a row is stored. fp32 clamps the floats (as max / min: equal up to the sign of a zero). 16-bit outputs clamp after
// rounding, two values an instruction, against the bounds rounded into OutT (ClampPair: the same result as rounding
// the clamped float, up to the sign of a zero). Bound is the shared arrays' element type.
template <typename OutT>
struct RowClamp {
  static constexpr bool kPacked = sizeof(OutT) == 2;
  using Bound = std::conditional_t<kPacked, OutT, float>;
  // fp32: 8 floats each; 16-bit: 4 words of rounded pairs (first channel in the low half).
  std::conditional_t<kPacked, uint32_t, float> lo[kPacked ? 4 : 8], hi[kPacked ? 4 : 8];

  // The bounds of channels [c, c + 8) from shared arrays of Bound (16-byte aligned at lo, hi).
  __device__ __forceinline__ void Load(const Bound* s_lo, const Bound* s_hi) {
    if constexpr (kPacked) {
      const uint4 l4 = *reinterpret_cast<const uint4*>(s_lo), h4 = *reinterpret_cast<const uint4*>(s_hi);
      lo[0] = l4.x, lo[1] = l4.y, lo[2] = l4.z, lo[3] = l4.w;
      hi[0] = h4.x, hi[1] = h4.y, hi[2] = h4.z, hi[3] = h4.w;
    } else {
      LoadShared<8>(s_lo, lo);
      LoadShared<8>(s_hi, hi);
    }
  }
  // A row's 8 reconstructed values (y[v]: channel c + v), clamped and stored at `at`.
  __device__ __forceinline__ void StoreRow(OutT* at, float* y) const {
    if constexpr (kPacked) {
      StoreGlobal16(at, ClampPair<OutT>(PackPair<OutT>(y[0], y[1]), lo[0], hi[0]),
                    ClampPair<OutT>(PackPair<OutT>(y[2], y[3]), lo[1], hi[1]),
                    ClampPair<OutT>(PackPair<OutT>(y[4], y[5]), lo[2], hi[2]),
                    ClampPair<OutT>(PackPair<OutT>(y[6], y[7]), lo[3], hi[3]));
    } else {
#pragma unroll
      for (int v = 0; v < 8; ++v) y[v] = fminf(fmaxf(y[v], lo[v]), hi[v]);
      StoreVec<OutT, 8>(at, y);
    }
  }
};

constexpr int kLynxTileDecodeMinBlocks = 4;  // 64 registers: fits without spilling (48, for 5 blocks, spills ~400 B)

// Stream layouts LynxTileDecodeKernel merges without moving nibbles into value order: kOne4 (one 4-bit stream)
// and kTwo4 (4 + 4 bits) keep the codes of a row's even values in bytes 0-3 of a word and the odd ones in bytes
// 4-7 of it, or of a second word (ValueOfByte); kAny merges any widths in value order (MergeStage).
enum class CodeLayout { kAny, kOne4, kTwo4 };
template <CodeLayout kLayout>
__device__ __forceinline__ constexpr int ValueOfByte(int e) {
  return kLayout == CodeLayout::kAny ? e : (e < 4 ? 2 * e : 2 * (e - 4) + 1);
}

// Lynx in the common shape (LynxTileDecodeFits): DecodeKernel's lynx work with nothing per token but the value
// arithmetic. Block (128 channels, 128 tokens, page); thread (vector j, slice s) decodes channels [c, c + 8) of 8
// consecutive tokens, which lie in one chunk (chunk_len % 8 == 0) and in consecutive rows of one destination block
// (block_tokens % 8 == 0). The loads of its chunk parameters' range and end pairs are issued first, then its code
// loads and block id; then the block's decode table and the tile's chunk parameters, each thread those of one
// channel (its frame computed once) and every other chunk; after one barrier each thread holds its chunk's (mu,
// sigma, lo, hi) for all 8 rows. kLayout: see CodeLayout.
// kExact: apply the exact-extremes rule (a partial decode with DecodeParams::exact_extremes); a separate
// instance, so that the other decodes pay nothing for it.
template <typename OutT, CodeLayout kLayout, bool kExact>
__global__ void __launch_bounds__(kThreads, kLynxTileDecodeMinBlocks)
    LynxTileDecodeKernel(const DecodeParams p, const LynxDeviceTables* __restrict__ tables) {
  constexpr int kGroupChannels = kDecodeVecThreads * 8;
  constexpr int kRows = kDecodeTokensPerThread;
  constexpr int kChunkStep = kThreads / kGroupChannels;  // 2: threads tid and tid + 128 share a channel
  static_assert(kThreads % kGroupChannels == 0, "whole channel groups");
  static_assert(!(kExact && kLayout == CodeLayout::kTwo4), "kTwo4 keeps no prefix words for the rule's cells");
  // 1024-byte aligned: a lookup's shared address is the table's with its low byte replaced (kOne4) or its low 10
  // bits OR-ed in (prefix * 4 < 1024: 8 prefix bits at most, the exact-extremes bit included).
  __shared__ __align__(1024) float s_table[256];
  __shared__ __align__(16) float s_mu[kDecodeMaxTileChunks][kGroupChannels];
  __shared__ __align__(16) float s_sigma[kDecodeMaxTileChunks][kGroupChannels];
  // The page-channel ranges the values are clamped to (RowClamp).
  using RangeT = typename RowClamp<OutT>::Bound;
  __shared__ __align__(16) RangeT s_lo[kGroupChannels];
  __shared__ __align__(16) RangeT s_hi[kGroupChannels];
  // Exact extremes: per warp and vector lane, the top cells its two slices saw (TopCells), for the chunk's other
  // warps to merge after the block's one barrier.
  __shared__ uint32_t s_tops[kExact ? kThreads / 32 : 1][kDecodeVecThreads];
  const int tid = threadIdx.x;
  const int page = blockIdx.z;
  const int tokens = p.shape.tokens;
  const int channels = p.shape.channels;
  const int cg0 = blockIdx.x * kGroupChannels;
  const int c = cg0 + (tid % kDecodeVecThreads) * 8;
  const int t_tile = blockIdx.y * kDecodeTileTokens;
  const int t_first = t_tile + (tid / kDecodeVecThreads) * kRows;
  const int rows = min(kRows, tokens - t_first);
  const bool active = c < channels && rows > 0;
  const int bt = p.dst.block_tokens;
  // The page's block of the thread's rows. kAny divides: with the multiply-high its instances spill 24 bytes
  // (measured: lynx8's full decode 0.053 -> 0.055 ms), as the register allocation comes out differently.
  const int bj = kLayout == CodeLayout::kAny ? t_first / bt : p.block_div.Divide(t_first);

  // The thread's channel of the tile's chunk parameters, cc, and its first chunk kk0 (then every kChunkStep-th):
  // the range and the words of the first two end pairs are loaded first, ahead of the codes, as the parameters
  // are the longer way to the block's barrier; the pairs are cut out of their words after the codes are asked for.
  const uint8_t* meta = p.in.meta + page * p.in.meta_stride;
  const int k_first = p.chunk_div.Divide(t_tile);
  const int tile_chunks = p.chunk_div.Divide(min(t_tile + kDecodeTileTokens, tokens) - 1) - k_first + 1;
  const int cc = tid % kGroupChannels;
  const int kk0 = tid / kGroupChannels;
  const int ca = cg0 + cc;
  const bool param_thread = ca < channels;
  // Chunk-channel indices (< 2^22: see ReadEndPairAligned).
  const unsigned i0 = static_cast<unsigned>(k_first + kk0) * channels + ca;
  const unsigned i1 = i0 + static_cast<unsigned>(kChunkStep) * channels;
  const uint8_t* ends = meta + p.in.ends_offset;
  float l = 0.0f, h = 0.0f;
  EndPairWords pair0_words, pair1_words;
  if (param_thread) {
    l = reinterpret_cast<const float*>(meta)[ca];
    h = reinterpret_cast<const float*>(meta)[channels + ca];
    if (kk0 < tile_chunks) pair0_words = LoadEndPairWords(ends, i0, p.shape.end_pair_bits);
    if (kk0 + kChunkStep < tile_chunks) pair1_words = LoadEndPairWords(ends, i1, p.shape.end_pair_bits);
  }

  // The thread's loads: every stage's fields of its rows (kAny: merged into one code prefix byte per value;
  // kOne4, kTwo4: the code words as they are) and its destination block.
  unsigned long long pre[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) pre[i] = 0;
  // kOne4 keeps its code words as loaded (half the registers of prefix words; the exact-extremes rule works on
  // them directly) and spreads each row into its lookups' byte offsets (prefix * 4) as it decodes. kTwo4 keeps
  // both streams' words (as many registers as the prefix words) and merges a row as it decodes it, so that no
  // instruction waits for the codes before the chunk parameters are done.
  uint32_t nibbles[kLayout != CodeLayout::kAny ? kRows : 1] = {};
  uint32_t resid[kLayout == CodeLayout::kTwo4 ? kRows : 1] = {};
  int block = 0;
  if (active) {
    block = p.dst.block_ids[static_cast<size_t>(page) * p.dst.blocks_per_page + bj];
    const unsigned octet0 = (static_cast<unsigned>(t_first) * channels + c) >> 3;
    const unsigned row_octets = static_cast<unsigned>(channels) >> 3;
    if constexpr (kLayout != CodeLayout::kAny) {
      // A row's 8 nibbles of each stream, one 4-byte load each, kept as loaded.
      const uint32_t* a = reinterpret_cast<const uint32_t*>(p.in.codes[0] + page * p.in.codes_stride[0]) + octet0;
      const uint32_t* r = kLayout == CodeLayout::kTwo4
                              ? reinterpret_cast<const uint32_t*>(p.in.codes[1] + page * p.in.codes_stride[1]) + octet0
                              : a;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        nibbles[i] = i < rows ? a[i * row_octets] : 0u;
        if constexpr (kLayout == CodeLayout::kTwo4) resid[i] = i < rows ? r[i * row_octets] : 0u;
      }
    } else {
      MergeStages(p, page, octet0, row_octets, rows, pre);
    }
  }

  const unsigned pair0 = CutEndPair(pair0_words, i0, p.shape.end_pair_bits),
                 pair1 = CutEndPair(pair1_words, i1, p.shape.end_pair_bits);

  // The prefix bits a value has (a constant for the fixed layouts).
  int known = kLayout == CodeLayout::kOne4 ? 4 : kLayout == CodeLayout::kTwo4 ? 8 : 0;
  if constexpr (kLayout == CodeLayout::kAny) {
    for (int s = 0; s < p.stages; ++s) known += p.stage_bits[s];
  }
  // The page's anchor tables, every entry checked (as the CPU decoder does); the decode table is the stored one of
  // this stage (upper half negated) or the fixed rule's, its 2^known entries.
  {
    const uint8_t* stored = meta + p.in.tables_offset;
    if (tid < p.in.table_floats) {
      const float v = ReadF32(stored + 4 * tid);
      if (!(v >= 0.0f && v <= 1.0f)) atomicOr(&p.status->errors, kErrBadAnchorTable);
    }
    const int entries = 1 << known;
    if (tid < entries) {
      float v;
      if (tables->decode_from_page) {
        const int half = entries >> 1;
        const float m = ReadF32(stored + 4 * (tables->table_first + (tid & (half - 1))));
        v = tid < half ? m : -m;
      } else {
        v = tables->decode[tid];
      }
      s_table[tid] = v;
      // Exact extremes: entry entries + prefix is the full top code of the prefix's sign (the value a single takes).
      if constexpr (kExact) {
        const float top = tables->full_values[tables->max_code];
        s_table[entries + tid] = tid < (entries >> 1) ? top : -top;
      }
    }
  }
  // The tile's chunk parameters of channel cc.
  if (param_thread) {
    if (kk0 == 0) {
      if (!isfinite(l) || !isfinite(h) || !(l <= h)) atomicOr(&p.status->errors, kErrBadChannelRange);
      s_lo[cc] = FromFloat<RangeT>(l);
      s_hi[cc] = FromFloat<RangeT>(h);
    }
    const Frame f = MakeChannelFrame(l, h, p.shape.grid_max);
    bool bad = false;
    for (int kk = kk0; kk < tile_chunks; kk += kChunkStep) {
      unsigned pair;
      if (kk == kk0) {
        pair = pair0;
      } else if (kk == kk0 + kChunkStep) {
        pair = pair1;
      } else {
        pair = ReadEndPairAligned(ends, static_cast<unsigned>(k_first + kk) * channels + ca, p.shape.end_pair_bits);
      }
      int ql, qh;
      if (!EndPairFromIndex(pair, p.shape.grid_max, ql, qh)) {
        bad = true;
        ql = qh = 0;
      }
      float mu, sigma;
      ChunkCentreAndWidth(f, ql, qh, mu, sigma);
      s_mu[kk][cc] = mu;
      s_sigma[kk][cc] = sigma;
    }
    if (bad) atomicOr(&p.status->errors, kErrBadChunkEnds);
  }
  // Exact extremes (codec/internal/lynx_extremes.h): a value alone in its chunk-channel's top cell (of its sign)
  // decodes as the full top code. The launch guarantees that each chunk lies in this tile, in chunk_len / 8
  // consecutive slices (whole warps, or the two slices of one warp). Each thread finds its top-cell values with
  // byte tests on its prefix words (kOne4: nibble tests on its code words, NibbleTopCells) and folds them into
  // TopCells; the warp's two slices merge by a shuffle, the chunk's warps through s_tops across the barrier above
  // the table work.
  //
  // A prefix word's top-cell bytes and negative bytes, 0x01 in byte e where prefix byte e has the top cell of its
  // sign / is negative: computed where needed (before the barrier as masks, after it per row) rather than kept
  // across the barrier, which would spill.
  constexpr unsigned long long kOnes = 0x0101010101010101ull;
  auto top_and_negative = [&](unsigned long long w, unsigned long long& top, unsigned long long& negative) {
    const unsigned long long mag = kOnes * ((1u << (known - 1)) - 1), low7 = 0x7F7F7F7F7F7F7F7Full;
    const unsigned long long x = (w & mag) ^ mag;                 // zero bytes: magnitude bits all set
    top = ~(((x & low7) + low7) | x | low7) >> 7;                 // 0x01 exactly at the zero bytes
    negative = (w >> (known - 1)) & kOnes;
  };
  // Bit e = byte e of 0x00 / 0x01 bytes.
  auto byte_mask = [](unsigned long long bytes) {
    return static_cast<uint32_t>((bytes * 0x0102040810204080ull) >> 56);
  };
  // kOne4 folds its code words in TopCells' nibble layout (rows past the page are zero words: no top cells).
  constexpr bool kNibbleCells = kLayout == CodeLayout::kOne4;
  auto pack = [](const TopCells& t) { return kNibbleCells ? t.PackNibbles() : t.Pack(); };
  auto unpack = [](uint32_t w) { return kNibbleCells ? TopCells::UnpackNibbles(w) : TopCells::Unpack(w); };
  TopCells cells;
  if constexpr (kExact) {
    if (active) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        if constexpr (kNibbleCells) {
          cells.Add(NibbleTopCells(nibbles[i]));
        } else {
          unsigned long long top, negative;
          top_and_negative(pre[i], top, negative);
          const uint32_t m = byte_mask(top), n = byte_mask(negative);
          if (i < rows) cells.Add((m & ~n) | ((m & n) << 8));
        }
      }
    }
    cells.Merge(unpack(__shfl_xor_sync(0xFFFFFFFFu, pack(cells), kDecodeVecThreads)));
    if (tid % 32 < kDecodeVecThreads) s_tops[tid / 32][tid % 32] = pack(cells);
  }
  __syncthreads();
  const int kk = p.chunk_div.Divide(t_first) - k_first;
  // once: the top cells (TopCells bits) that the thread's chunk has exactly one value in.
  uint32_t once = 0;
  if constexpr (kExact) {
    // A chunk's warps: chunk_len / 16 of them, a power of two (chunk_len divides the 128-token tile).
    const int chunk_warps = p.shape.chunk_len / (2 * kRows);
    if (chunk_warps > 1) {
      const int w0 = (tid / 32) & -chunk_warps;
      cells = TopCells{};
      for (int w = w0; w < w0 + chunk_warps; ++w) cells.Merge(unpack(s_tops[w][tid % kDecodeVecThreads]));
    }
    once = cells.Once();
  }
  // The same as bytes: 0x01 at byte e where prefix byte e's channel has one top-cell value, positive; negative.
  unsigned long long once_pos = 0, once_neg = 0;
  if constexpr (kExact && !kNibbleCells) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      once_pos |= static_cast<unsigned long long>((once >> e) & 1) << (8 * e);
      once_neg |= static_cast<unsigned long long>((once >> (8 + e)) & 1) << (8 * e);
    }
  }
  // kOne4: `once` split by sign, each at bit 4 e of nibble e's channel, so that a row picks by its sign bits.
  const uint32_t once_p = once & 0x11111111u, once_n = (once >> 1) & 0x11111111u;
  const bool block_ok = block >= 0 && block < p.dst.num_blocks;
  if (active && !block_ok) atomicOr(&p.status->errors, kErrBadBlockId);
  if (active && block_ok) {
    float mu[8], sigma[8];
    LoadShared<8>(&s_mu[kk][c - cg0], mu);
    LoadShared<8>(&s_sigma[kk][c - cg0], sigma);
    RowClamp<OutT> clamp;
    clamp.Load(&s_lo[c - cg0], &s_hi[c - cg0]);
    const bool nhd = p.dst.layout == Layout::kNhd;
    const int row = t_first - bj * bt;  // in that block
    OutT* out = static_cast<OutT*>(p.dst.data) + ChannelOffset(p.dst, 0, c) +
                (nhd ? (static_cast<size_t>(block) * bt + row) * channels
                     : static_cast<size_t>(block) * p.dst.heads * bt * p.dst.head_dim +
                           static_cast<size_t>(row) * p.dst.head_dim);
    const size_t row_stride = nhd ? channels : p.dst.head_dim;
    const uint32_t table_base = static_cast<uint32_t>(__cvta_generic_to_shared(s_table));
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (i < rows) {
        float y[8];
        if constexpr (kNibbleCells) {
          // The row's prefixes as byte offsets into s_table (prefix * 4 < 128, a byte each): even values' in
          // `even`, odd ones' in `odd`, so that each lookup is one byte permute and one shared load.
          const uint32_t word = nibbles[i];
          uint32_t even = (word << 2) & 0x3C3C3C3Cu, odd = (word >> 2) & 0x3C3C3C3Cu;
          if constexpr (kExact) {
            // Nibble e is a single if it has a top cell that its chunk-channel saw once: bit 4 e of once_p for a
            // positive one, of once_n for a negative one (its sign: bit 4 e of word >> 3; the masked once_p and
            // once_n drop the other bits). Its prefix gets bit `known` (4): offset bit 6.
            const uint32_t signs = word >> 3;
            const uint32_t single = NibbleTops(word) & ((once_p & ~signs) | (once_n & signs));
            even |= (single & 0x01010101u) << 6;
            odd |= (single & 0x10101010u) << 2;
          }
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            // The offset byte replaces the low byte of the table's address (the table is 1024-byte aligned).
            const uint32_t at = __byte_perm(e < 4 ? even : odd, table_base, 0x7650 | (e & 3));
            float t;
            asm volatile("ld.shared.f32 %0, [%1];" : "=f"(t) : "r"(at));
            const int v = ValueOfByte<kLayout>(e);
            y[v] = mu[v] + sigma[v] * t;
          }
        } else {
          // A single's prefix byte gets bit `known` set, which selects the table's full top code for it.
          unsigned long long w = kLayout == CodeLayout::kTwo4 ? Two4Prefixes(nibbles[i], resid[i]) : pre[i];
          if constexpr (kExact) {
            unsigned long long top, negative;
            top_and_negative(w, top, negative);
            w |= (top & ((negative & once_neg) | (~negative & once_pos))) << known;
          }
          const uint32_t w_lo = static_cast<uint32_t>(w), w_hi = static_cast<uint32_t>(w >> 32);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            // Prefix byte e times 4 (bits 2-9) OR-ed into the table's address: one shift and one LOP3 a lookup.
            const uint32_t half = e < 4 ? w_lo : w_hi;
            const int shift = 8 * (e & 3) - 2;
            const uint32_t at = ((shift < 0 ? half << 2 : half >> shift) & 0x3FCu) | table_base;
            float t;
            asm volatile("ld.shared.f32 %0, [%1];" : "=f"(t) : "r"(at));
            // Reconstruct (lynx_math.h) up to its clamp, which StoreRow takes.
            const int v = ValueOfByte<kLayout>(e);
            y[v] = mu[v] + sigma[v] * t;
          }
        }
        if constexpr (kNibbleCells) {
          clamp.StoreRow(out, y);
          if (i + 1 < kRows) out += row_stride;  // a pointer step a row (not a 64-bit product), none past the last
        } else {
          clamp.StoreRow(out + i * row_stride, y);  // the step costs the wider instances spills
        }
      }
    }
  }
  if (p.frame_spikes_in_tiles) {
    __syncthreads();  // the block's stores before the spikes' stores over them (the same addresses)
    // The tile's coordinates again from the block index and the parameters: kept live across the stores, they
    // cost the register-capped instances spills.
    const int ch = blockIdx.x * kGroupChannels + static_cast<int>(threadIdx.x);
    const int t0 = blockIdx.y * kDecodeTileTokens;
    if (threadIdx.x < kGroupChannels && ch < p.shape.channels) {
      ScatterFrameSpikes<OutT>(p.in, p.shape, p.dst, p.status, blockIdx.z, ch, t0,
                               min(t0 + kDecodeTileTokens, p.shape.tokens));
    }
  }
}
}  // namespace

bool LynxTileDecodeFits(const DecodeParams& p) {
  return p.shape.channels % 8 == 0 && p.dst.head_dim % 8 == 0 && Aligned16(p.dst.data) &&
         p.shape.chunk_len >= 16 && p.shape.chunk_len % kDecodeTokensPerThread == 0 &&
         p.dst.block_tokens % kDecodeTokensPerThread == 0;
}

absl::Status LaunchLynxTileDecode(const DecodeParams& p, const LynxDeviceTables* tb, cudaStream_t stream) {
  const dim3 grid((p.shape.channels + 8 * kDecodeVecThreads - 1) / (8 * kDecodeVecThreads),
                  (p.shape.tokens + kDecodeTileTokens - 1) / kDecodeTileTokens, p.shape.num_pages);
  return ForDType(p.dst.dtype, [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    if (p.stages == 2 && p.stage_bits[0] == 4 && p.stage_bits[1] == 4) {
      LynxTileDecodeKernel<OutT, CodeLayout::kTwo4, false><<<grid, kThreads, 0, stream>>>(p, tb);
    } else if (p.stages == 1 && p.stage_bits[0] == 4) {
      if (p.exact_extremes) {
        LynxTileDecodeKernel<OutT, CodeLayout::kOne4, true><<<grid, kThreads, 0, stream>>>(p, tb);
      } else {
        LynxTileDecodeKernel<OutT, CodeLayout::kOne4, false><<<grid, kThreads, 0, stream>>>(p, tb);
      }
    } else if (p.exact_extremes) {
      LynxTileDecodeKernel<OutT, CodeLayout::kAny, true><<<grid, kThreads, 0, stream>>>(p, tb);
    } else {
      LynxTileDecodeKernel<OutT, CodeLayout::kAny, false><<<grid, kThreads, 0, stream>>>(p, tb);
    }
    return LaunchError("LynxTileDecodeKernel");
  });
}

}  // namespace kvt::codec::gpu::internal
