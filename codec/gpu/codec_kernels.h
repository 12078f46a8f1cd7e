// The launch interface of the codec's CUDA kernels (codec_encode_kernels.cu, codec_decode_kernels.cu), plain C++ for codec_cuda.cc. Raw
// device pointers, all checked by the caller; every launch error comes back as a Status. Not API: use
// codec_cuda.h. Thread-safe (no state).
#ifndef KVT_CODEC_GPU_CODEC_KERNELS_H_
#define KVT_CODEC_GPU_CODEC_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "numerics/dtype.h"
#include "numerics/host_device.h"
#include "codec/scheme.h"

namespace kvt::codec::gpu::internal {

using DType = ::kvt::numerics::DType;
using Layout = ::kvt::numerics::BlockOrder;

// Where value (page p, token t, channel c) lives: block block_ids[p * blocks_per_page + t / block_tokens],
// row t % block_tokens, in a [blocks, block_tokens, heads, head_dim] (NHD) or [blocks, heads, block_tokens,
// head_dim] (HND) array of `dtype`.
struct KvGeometry {
  void* data = nullptr;
  DType dtype = DType::kBfloat16;
  Layout layout = Layout::kNhd;
  int num_blocks = 0, block_tokens = 0, heads = 0, head_dim = 0;
  const int32_t* block_ids = nullptr;  // device
  int blocks_per_page = 0;
};

struct PageShape {
  int num_pages = 0, tokens = 0, channels = 0;
  int chunk_len = 0;   // min(chunk_tokens, tokens)
  int num_chunks = 0;  // tokens / chunk_len
  // Lynx (docs/FORMAT.md, version 4): the end pair width, its grid (EndGridMax) and the frame spikes per channel
  // (PageFrameSpikes: the scheme's, at most chunk_len - 1).
  int end_pair_bits = 23;
  int grid_max = 4094;
  int frame_spikes = 0;
};

// The staging layout of DeviceEncodedPages.
struct Staging {
  uint8_t* meta = nullptr;
  size_t meta_stride = 0;
  // Lynx: the byte offsets in meta of the chunk end pairs (PageShape::end_pair_bits each) and of the anchor tables
  // (docs/FORMAT.md), and the number of f32 table entries (LynxAnchorTableFloats).
  size_t ends_offset = 0, tables_offset = 0;
  int table_floats = 0;
  // Lynx with frame spikes: their f32 values from frame_offset in meta, [spike][channel], then their u16 tokens.
  size_t frame_offset = 0;
  // The encoder's scratch for frame spikes: the value coded in each spike's place (its chunk-channel's first
  // non-spike value), [page][spike][channel] floats. Null without frame spikes.
  float* frame_sub = nullptr;
  // The general encoder's multi-stream lynx anchor tables' input: 256 u32 code counts per page (zeroed by the
  // launch). The tile encoder counts in shared memory instead.
  uint32_t* histogram = nullptr;
  // The general encoder with the exact-extremes rule: the singles' code counts that each partial stage's table
  // leaves out, [page][partial stage][code] (256 * (streams - 1) u32 per page; zeroed by the launch).
  uint32_t* exclusions = nullptr;
  uint8_t* codes[kMaxStreams] = {};
  size_t codes_stride[kMaxStreams] = {};
};

// What the host reads back after a launch: the complement of the smallest linear index page * tokens * channels +
// t * channels + c of a non-finite input (kNoNonFinite, 0, if none: kept by atomicMax of complements), and bits of
// DeviceError. All zero is "no error", so one fill clears it.
struct DeviceStatus {
  unsigned long long non_finite_complement;
  unsigned int errors;
  unsigned int pad;
};
enum DeviceError : unsigned int {
  kErrBadBlockId = 1u,       // a block id outside [0, num_blocks)
  kErrBadChannelRange = 2u,  // lynx lo/hi not finite or lo > hi
  kErrBadFp16Meta = 4u,      // int8/int4 min or scale not finite
  kErrBadFp8Scale = 8u,      // fp8 scale not finite, negative or overflowing
  kErrNonFiniteCode = 16u,   // fp8 NaN code or bf16 NaN/Inf value
  kErrBadChunkEnds = 32u,    // lynx chunk end pair index past the grid
  kErrBadAnchorTable = 64u,  // lynx anchor table entry not in [0, 1]
  kErrBadFrameSpike = 128u,  // lynx frame spike not finite, past the page or out of token order
};
inline constexpr unsigned long long kNoNonFinite = 0;

// The lynx family's tables for one (alpha, top_width, bits), as lynx_math.h builds them, in device memory for a launch.
inline constexpr int kMaxDeviceBuckets = 4096;
inline constexpr int kMaxDeviceCorrections = 8;
// Bucket tables of up to this many buckets take the lynx tile encoder's bucket path (tile_buckets below).
inline constexpr int kMaxTileBuckets = 1024;
// 2^23 / buckets, the magic addend of the tile encoder's bucket index (TileCode): exact, as bucket counts are powers
// of two. Shared with the host test that checks the index (lynx_device_tables_test).
inline float TileBucketMagic(int buckets) { return 8388608.0f / static_cast<float>(buckets); }
// Whether tables of this LynxDeviceTables::bucket_count (0: no bucket path) fill tile_buckets, and so whether the
// tile encoder takes its bucket path: the one test FillLynxTables and LaunchLynxTileEncode share.
inline bool TakesTileBuckets(int bucket_count) { return bucket_count > 0 && bucket_count <= kMaxTileBuckets; }
// The magnitude code of a in [0, 1] from its bucket's entry of LynxDeviceTables::tile_buckets (entry j for
// j = floor(a * bucket_count)): the entry's top byte is the code of the bucket's start, its low 24 bits 2^24 less
// the mantissa of the one threshold left inside the bucket (2^23 when none is), so a carry out of the low 24 bits
// is a >= that threshold. Mantissas alone compare because every a of a bucket j >= 1 has one exponent, the
// threshold's (bucket_count is a power of two, so [j / B, (j + 1) / B) lies in one binade), and bucket 0 holds no
// threshold (FillLynxTables checks both). The tile encoder's arithmetic, shared with its host test: the b-bit code,
// sign included, is the top byte of the sum (the kernel packs that byte as it is), in one of two forms.
// Any b: `sign` is 0, or the code's sign bit << 24 (the magnitude, at most 2^(b-1) - 1, lies below the sign bit, so
// the add is an OR).
KVT_HOST_DEVICE uint32_t TileBucketSum(uint32_t entry, uint32_t a_bits, uint32_t sign) {
  return entry + (a_bits & 0x007FFFFFu) + sign;
}
// 8-bit codes, whose sign bit is bit 31: from the bits of x = xf + 0 (the add turns -0, which codes as +0, into +0),
// whose sign and mantissa one mask keeps. For |xf| <= 1 x's mantissa is a's; past it a = 1 takes entry
// bucket_count, which holds no threshold, so any mantissa codes the same.
KVT_HOST_DEVICE uint32_t TileBucketSum8(uint32_t entry, uint32_t x_bits) { return entry + (x_bits & 0x807FFFFFu); }
struct LynxDeviceTables {
  float thresholds[128 + kMaxDeviceCorrections];  // [k] for k in 1..M, +inf past M; [0] = 0
  // lynx_math.h's exact bucket path (bucket_base as bytes, values <= 127); bucket_count 0 when the tables need
  // more than kMaxDeviceBuckets buckets or more than one correction (then a log guess is corrected).
  uint8_t bucket_base[kMaxDeviceBuckets + 1];
  int bucket_count;
  int corrections;
  // The lynx tile encoder's shared bucket table, whose first bucket_count / 4 + 1 16-byte pieces it copies, when
  // 0 < bucket_count <= kMaxTileBuckets (else unused): entry j in 0..bucket_count is bucket_base[j] << 24 | 2^24
  // less the mantissa of thresholds[bucket_base[j] + 1] if that threshold is below (j + 1) / bucket_count, else
  // 2^23 (TileBucketSum's entries), then padding to the piece. One word an entry, so that a warp's 32 lookups
  // spread over the 32 banks (two words an entry put a half-warp's 16 on 16 bank pairs). The tile encoder takes
  // bucket_count (and bits, max_code, alpha, inv_log1p_alpha) from the host's copy at launch (LaunchEncode's
  // host_tables) and reads only the entries here.
  alignas(16) uint32_t tile_buckets[kMaxTileBuckets + 4];
  float full_values[128];  // [I] for I in 0..M
  // Encode: the code-centre magnitudes of every partial stage's cells, concatenated as the anchor tables are
  // (the value of a cell no code falls in).
  float anchor_fallback[128];
  float decode[256];       // decode_table(known, rule) for the decode launch; unused by encode
  // Decode: 1 when the decode table is the page's stored conditional-mean table (entries [table_first,
  // table_first + 2^(known-1)) of its anchor tables), not `decode`.
  int decode_from_page;
  int table_first;
  float alpha;             // LynxTables::guess_alpha (the bulk of a curve with a knee)
  float inv_log1p_alpha;   // an approximation, used only as a starting guess
  int bits;
  int max_code;
};

// Channels per block of the lynx tile encoder (LaunchEncode's fast path, codec_lynx_tile_encode.cu).
inline constexpr int kTileChannels = 64;
// The anchor tables count the first min(channels, 64) channels (lynx_math.h kAnchorSampleChannels, which
// codec_cuda.cc checks this against): a page's first tile block holds them all and writes the tables itself.
inline constexpr int kAnchorSampleChannels = 64;
static_assert(kTileChannels == kAnchorSampleChannels, "one tile block holds the tables' channels");
// Partial stages whose exact-extremes exclusions the tile encoder keeps (schemes of up to 4 streams).
inline constexpr int kTileExclusionStages = 3;

// Encodes every page of the batch. centering_mean: Centering::kMean. exact_extremes: CodecOptions'; the anchor
// tables then leave out the rule's singles (lynx_extremes.h ExcludeSingleExtremes). `status` and `tables` (lynx
// only, else null) are device memory. `host_tables` is non-null exactly when `tables` is: the host bytes `tables`
// was staged from (read during the call only), whose bucket count, magic and coding constants (bits, max_code,
// alpha, inv_log1p_alpha) the tile encoder takes as launch parameters; it copies that many of `tables`' entries, so
// the two must be the same tables.
absl::Status LaunchEncode(const Scheme& scheme, bool centering_mean, bool exact_extremes, const LynxDeviceTables* tables,
                          const LynxDeviceTables* host_tables, const KvGeometry& src, const PageShape& shape,
                          const Staging& out, DeviceStatus* status, void* stream);

// The lynx tile encoder, which LaunchEncode uses when it fits: midrange centering, 32-token chunks, whole pages
// of 1..8 chunks, channels % kTileChannels == 0, 8 consecutive channels contiguous and 16-byte aligned in `src`,
// and (multi-stream) 1..128 anchor table entries in `out`; with exact_extremes, at most 1 + kTileExclusionStages
// streams (it finds the rule's singles itself). It writes every byte of the metadata (no zeroing first); a
// multi-stream page's anchor tables are written by its block of channel group 0, which holds the tables' channels.
bool LynxTileEncodeFits(const Scheme& scheme, bool centering_mean, bool exact_extremes, const KvGeometry& src,
                        const PageShape& shape, const Staging& out);
absl::Status LaunchLynxTileEncode(const Scheme& scheme, bool exact_extremes, const LynxDeviceTables* tables,
                                  const LynxDeviceTables& host_tables, const KvGeometry& src, const PageShape& shape,
                                  const Staging& out, DeviceStatus* status, void* stream);

// Lynx frame spikes (codec/internal/lynx_frame_spikes.h), before the general encoder (shape.frame_spikes > 0):
// selects every page-channel's spikes from `src`, writes their values and tokens into out.meta at
// out.frame_offset and the values to code in their places into out.frame_sub. The meta must be zeroed first.
absl::Status LaunchFrameSpikeSelect(const KvGeometry& src, const PageShape& shape, const Staging& out,
                                    DeviceStatus* status, void* stream);
// After a lynx decode with frame spikes: checks every page's spikes (kErrBadFrameSpike) and writes them into
// dst, over what the codes decoded there.
absl::Status LaunchFrameSpikeScatter(const Staging& in, const PageShape& shape, const KvGeometry& dst,
                                     DeviceStatus* status, void* stream);

// The general encoder's half of the exact-extremes rule: after the codes are written, counts into
// out.exclusions (zeroed) the code of every single top-cell value at a sampled token, per partial stage.
absl::Status LaunchExcludeSingleExtremes(const Scheme& scheme, const Staging& out, const PageShape& shape,
                                         void* stream);

// Decodes streams [0, stages) of every page into dst. `tables` (device memory; lynx only, else null) holds the
// decode table for `stages`. exact_extremes: a partial lynx decode applies the exact-extremes rule (fused into
// the tile kernel, else LaunchExactExtremes after the decode).
absl::Status LaunchDecode(const Scheme& scheme, int stages, bool exact_extremes, const LynxDeviceTables* tables,
                          const Staging& in, const PageShape& shape, const KvGeometry& dst, DeviceStatus* status,
                          void* stream);

// The exact-extremes rule of a partial lynx decode (codec/internal/lynx_extremes.h) as a separate pass, after a
// decode of the same `stages` into the same dst (LaunchDecode runs it when its kernel does not fuse the rule): for each (page, chunk, channel) and sign, the only value whose known-bit
// prefix is the top cell of that sign, if there is exactly one, is rewritten as Reconstruct(+-full_values[M]).
// Needs stages < all (known < bits). Pages whose metadata or block ids are bad are skipped (LaunchDecode
// reports them).
absl::Status LaunchExactExtremes(const Scheme& scheme, int stages, const LynxDeviceTables* tables,
                                 const Staging& in, const PageShape& shape, const KvGeometry& dst, void* stream);

}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_CODEC_KERNELS_H_
