// The per-implementation inner loops of the lynx family, behind one table of function pointers per
// implementation (reference, AVX2, AVX-512). Every implementation computes exactly the reference's codes and
// metadata (tests compare container bytes); reconstruction uses the same float ops, so decoded values agree too.
// Functions keep no state; thread-safe.
#ifndef KVT_CODEC_INTERNAL_LYNX_KERNELS_H_
#define KVT_CODEC_INTERNAL_LYNX_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/internal/lynx_math.h"
#include "codec/options.h"
#include "codec/page.h"

namespace kvt::codec::internal {

// The metadata of one lynx page, as stored (lo .. spike_index) and as derived for coding (frames, mu, sigma).
struct LynxPageMeta {
  int tokens = 0;
  int channels = 0;
  int chunk_len = 0;   // tokens per chunk: min(chunk_tokens, tokens)
  int num_chunks = 0;
  bool spikes = false;
  int end_pair_bits = 0;   // Scheme::end_pair_bits
  int grid_max = 0;        // EndGridMax(end_pair_bits)
  int frame_spikes = 0;    // per page-channel: PageFrameSpikes (container.h)
  std::vector<float> lo, hi;               // [channels]
  std::vector<uint16_t> q_low, q_high;     // [num_chunks * channels], chunk-major: the chunk's ends, 0..grid_max
  std::vector<float> spike_value;          // [num_chunks * channels] when spikes
  std::vector<uint8_t> spike_index;        // token within the chunk, < chunk_len
  // Frame spikes, spike-major: entry (j, c) at j * channels + c, a channel's tokens increasing in j
  // (lynx_frame_spikes.h).
  std::vector<uint16_t> frame_token;       // [frame_spikes * channels]
  std::vector<float> frame_value;          // [frame_spikes * channels]

  std::vector<ChannelFrame> frames;        // [channels]
  std::vector<float> mu, sigma, inv_sigma; // [num_chunks * channels]

  // Sizes every vector for the page; contents are unspecified until filled (a reused object keeps old values).
  void Resize(int tokens, int channels, int chunk_len, bool spikes, int end_pair_bits, int frame_spikes);
  // Fills frames, mu, sigma and inv_sigma from lo, hi, q_low, q_high (lynx_math.h's ChunkCentreAndWidth,
  // InverseSigma).
  void Derive();
};

struct LynxKernels {
  // Fills lo, hi, q_low, q_high for a page without spike reserving (meta is already Resize()d). Returns false,
  // meta unspecified, when the page holds a NaN or an infinity (the scan rides on the statistics pass).
  bool (*stats)(const PageView& page, Centering centering, LynxPageMeta& meta);
  // codes[t * channels + c] = the b-bit code (sign << (b - 1)) | I of value (t, c), using meta.mu / inv_sigma.
  void (*codes)(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes);
  // out(t, c) = Reconstruct(table[prefix[t * channels + c]], mu, sigma, frame) (spikes are not applied here).
  // `table` is decode_table(known, rule): 2^known entries, the upper half the negation of the lower.
  void (*reconstruct)(const uint8_t* prefix, const LynxPageMeta& meta, const float* table, int known,
                      const MutablePageView& out);
  // Whether every value of the page is finite.
  bool (*all_finite)(const PageView& page);
  // meta.Derive(), the same values.
  void (*derive)(LynxPageMeta& meta);
  // q_low[i], q_high[i] = EndPairFromIndex(index[i], grid_max) for i < n; false (outputs unspecified) if any
  // index is past the grid.
  bool (*end_pairs)(const uint32_t* index, size_t n, int grid_max, uint16_t* q_low, uint16_t* q_high);
  // UnpackEndPairs (lynx_math.h): the n `bits`-bit fields of EndPairBytes(n, bits) bytes at `in`; reads no byte
  // past them.
  void (*unpack_end_pairs)(const uint8_t* in, size_t n, int bits, uint32_t* index);
  // The inverse for the encoder: PackEndPairs of EndPairIndex(q_low[i], q_high[i]), i < n, into the
  // EndPairBytes(n, bits) bytes at `out`; writes no byte past them.
  void (*pack_end_pairs)(const uint16_t* q_low, const uint16_t* q_high, size_t n, int bits, uint8_t* out);

  // Optional fused paths (nullptr where an implementation has none) for schemes whose every stage is 4 bits
  // wide (lynx, lynx4). Each returns false, having written nothing, for a page it does not handle (the caller
  // then takes the unfused path); both give exactly the unfused path's bytes and values.
  //
  // codes_nibbles: `codes` for a page without spike reserving, packed straight into the 4-bit streams
  // (streams[i] gets field i of the code, top field first, as PackField lays it out; bits / 4 streams).
  bool (*codes_nibbles)(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables,
                        uint8_t* const* streams);
  // reconstruct_nibbles: `reconstruct` of the prefix of streams [0, stages) (4 bits each, known = 4 * stages),
  // read straight from the packed streams instead of through AppendField's byte-per-value prefix. With
  // exact_top != null (a partial decode under the exact-extremes rule, lynx_extremes.h) it applies the rule as
  // it writes each row: a chunk-channel's single top-cell value decodes as +-*exact_top, the full top code.
  bool (*reconstruct_nibbles)(const uint8_t* const* streams, int stages, const LynxPageMeta& meta,
                              const float* table, const float* exact_top, const MutablePageView& out);

  // The exact-extremes search of one chunk (lynx_extremes.h): RefChunkExtremes, or a vectorized equal (the
  // search is integer-exact, so every implementation finds the same rows).
  void (*chunk_extremes)(const uint8_t* prefix, size_t row_stride, int rows, int channels, uint8_t top_pos,
                         uint8_t top_neg, int16_t* pos, int16_t* neg);
  // RefApplyChunkExtremes, or a vectorized equal (the same float ops per value).
  void (*apply_chunk_extremes)(const int16_t* pos, const int16_t* neg, int k, float top, const LynxPageMeta& meta,
                               const MutablePageView& out);
  // The encoder's side of the rule: RefChunkSampledSingles, or a vectorized equal.
  size_t (*chunk_sampled_singles)(const uint8_t* codes, int rows, int channels, uint8_t high, uint8_t top_pos,
                                  uint8_t top_neg, int phase, uint32_t* out);
  // Optional (nullptr where an implementation has none): for a page with frame spikes (meta.frame_spikes > 0, no
  // spike reserving), `stats` of the page with them masked, selecting them on the way (frame_token / frame_value,
  // lynx_frame_spikes.h: the same spikes as SelectFrameSpikes) from the statistics pass's own chunk extremes. The
  // codes are then those of the unmasked page, fixed by CopyFrameSpikeCodes / CopyFrameSpikeNibbles. Without it
  // the encoder selects with SelectFrameSpikes and codes a masked copy. Returns false like `stats`.
  bool (*stats_frame_spikes)(const PageView& page, Centering centering, LynxPageMeta& meta);
  // Whether `stats` and `stats_frame_spikes` also fill what `derive` would (frames, mu, sigma, inv_sigma): the
  // quantization has the chunks' ends at hand.
  bool stats_derive = false;
  // Optional: the decoder's metadata from the stored end pairs in one pass, never materializing the indices or
  // the pairs: `unpack_end_pairs` of the chunk_values = num_chunks * channels fields at `ends`, `end_pairs`, then
  // what `derive` gives of frames, mu and sigma (inv_sigma is left unspecified: only the encoder's codes read
  // it; q_low and q_high too). Requires lo and hi filled (finite, lo <= hi). Returns false, those fields
  // unspecified, for a page it does not handle (channels not a multiple of 16) or an index past the grid: the
  // caller then takes the unfused path, which names the bad index.
  bool (*decode_chunk_parameters)(const uint8_t* ends, LynxPageMeta& meta) = nullptr;
};

void DeriveLynxMeta(LynxPageMeta& meta);  // calls meta.Derive()
// The reference end_pairs: EndPairFromIndex per index.
bool RefEndPairs(const uint32_t* index, size_t n, int grid_max, uint16_t* q_low, uint16_t* q_high);
// The reference pack_end_pairs: EndPairIndex per pair, then PackEndPairs.
void RefPackEndPairs(const uint16_t* q_low, const uint16_t* q_high, size_t n, int bits, uint8_t* out);

const LynxKernels& ReferenceLynxKernels();
const LynxKernels& Avx2LynxKernels();    // requires ImplAvailable(kAvx2)
const LynxKernels& Avx512LynxKernels();  // requires ImplAvailable(kAvx512)
// The kernels for a resolved implementation (not kAuto).
const LynxKernels& KernelsFor(CodecImpl impl);

// The reference loops restricted to channels [c_begin, c_end): the vectorized kernels run them on the channels
// left over after their last full vector, so those channels get exactly the reference's results.
void RefStatsRange(const PageView& page, Centering centering, LynxPageMeta& meta, int c_begin, int c_end);
void RefCodesRange(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes,
                   int c_begin, int c_end);
void RefReconstructRange(const uint8_t* prefix, const LynxPageMeta& meta, const float* table,
                         const MutablePageView& out, int c_begin, int c_end);

// Fills q_low / q_high of chunks [0, num_chunks) of channels [c_begin, c_end) from their minimum, maximum and
// target centre (chunk-major arrays of num_chunks * channels, like q_low) and the channels' lo / hi, which
// must be set: QuantizeChunkEnds per chunk. The vectorized stats kernels share it.
void QuantizeChunkRange(LynxPageMeta& meta, Centering centering, const float* cmin, const float* cmax,
                        const float* centre, int c_begin, int c_end);

// Spike-reserving statistics (scalar, shared by every implementation): per chunk, the value farthest from the
// chunk's centre is the spike; lo/hi and q_low/q_high describe the remaining values.
void SpikeStats(const PageView& page, Centering centering, LynxPageMeta& meta);

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_KERNELS_H_
