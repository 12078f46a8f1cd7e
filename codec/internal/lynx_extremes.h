// The exact-extremes rule of a partial lynx decode (docs/CODEC.md "Exact extremes").
//
// With midrange centering a chunk's largest value maps to x_final = +1 and its smallest to -1, so each has the
// top magnitude code M, and its prefix (the known top bits of the code) is the top cell of its sign. A partial
// decode cannot tell the values of the top cell apart and puts them all at one reconstruction point (the
// cell's conditional mean): every chunk extreme shrinks a little, coherently across the channels a query reads,
// which biases attention logits. But when exactly one value of a chunk-channel has the top cell of its sign,
// that value is the chunk's extreme on that side: it decodes as the full code +-M (= the stored chunk end),
// exactly what a full decode gives it. No container change; the encoder's side is only that the anchor tables
// leave those values out (ExcludeSingleExtremes below).
//
// The searches are integer-exact, so every implementation (portable, AVX2, AVX-512) finds the same tokens; the
// value written is Reconstruct(+-full_values[M], mu, sigma, frame), the float ops of every other reconstruction.
#ifndef KVT_CODEC_INTERNAL_LYNX_EXTREMES_H_
#define KVT_CODEC_INTERNAL_LYNX_EXTREMES_H_

#include <cstddef>
#include <cstdint>

#include "codec/internal/bitpack.h"
#include "codec/internal/lynx_kernels.h"
#include "codec/page.h"

namespace kvt::codec::internal {

// "No single value": zero or several values of the chunk-channel have the top cell of that sign.
inline constexpr int16_t kNoExtreme = -1;

// The top cells of a `known`-bit prefix (1 <= known < 8): sign 0 with every magnitude bit set, and sign 1 with
// every magnitude bit set.
inline uint8_t TopCellPositive(int known) { return static_cast<uint8_t>((1u << (known - 1)) - 1); }
inline uint8_t TopCellNegative(int known) { return static_cast<uint8_t>((1u << known) - 1); }

// One chunk of prefixes: `rows` (1..256) rows of `channels` bytes, `row_stride` bytes apart. For each channel c
// in [0, channels): pos[c] = the row of the only prefix equal to top_pos, or kNoExtreme; likewise neg.
void RefChunkExtremes(const uint8_t* prefix, size_t row_stride, int rows, int channels, uint8_t top_pos,
                      uint8_t top_neg, int16_t* pos, int16_t* neg);

// The same for a chunk of one packed 4-bit stream (the anchor-only decode of lynx / lynx4, known = 4): rows of
// `channels` nibbles (value c in byte c / 2, low nibble first: bitpack.h's layout), `row_bytes` = channels / 2
// apart, so `channels` must be even; top cells 0b0111 and 0b1111.
void RefChunkExtremesNibbles(const uint8_t* packed, int rows, int channels, int16_t* pos, int16_t* neg);

// AVX-512 (F, BW) equals of the two searches; only call them when the CPU has AVX-512BW.
void Avx512ChunkExtremes(const uint8_t* prefix, size_t row_stride, int rows, int channels, uint8_t top_pos,
                         uint8_t top_neg, int16_t* pos, int16_t* neg);
void Avx512ChunkExtremesNibbles(const uint8_t* packed, int rows, int channels, int16_t* pos, int16_t* neg);

// Writes the full-code reconstruction of chunk k's single extremes of channels [c_begin, c_end) into `out`
// (token k * chunk_len + row): Reconstruct(top, mu, sigma, frame) for pos, Reconstruct(-top, ...) for neg, with
// top = full_values[M].
void RefApplyChunkExtremesRange(const int16_t* pos, const int16_t* neg, int k, float top, const LynxPageMeta& meta,
                                const MutablePageView& out, int c_begin, int c_end);
void RefApplyChunkExtremes(const int16_t* pos, const int16_t* neg, int k, float top, const LynxPageMeta& meta,
                           const MutablePageView& out);
// The same, 16 channels a vector, the values compressed into a list and stored in one loop; requires AVX-512
// F/BW/VL.
void Avx512ApplyChunkExtremes(const int16_t* pos, const int16_t* neg, int k, float top, const LynxPageMeta& meta,
                              const MutablePageView& out);

// ---- The table side of the rule (the encoder) ----------------------------------------------------------------

// The chunk's first sampled row, for a chunk that starts `phase` rows into the page ((phase + r) %
// kAnchorSampleStride == 0).
inline int FirstSampledRow(int phase) {
  return (kAnchorSampleStride - phase % kAnchorSampleStride) % kAnchorSampleStride;
}

// The ChunkSampledSingles kernels' first pass, per lane of a mask (a bit, or a byte's top bit): whether the
// chunk's rows have had a match there once or more (once) and twice or more (again).
template <typename Mask>
struct SeenMasks {
  Mask once = 0, again = 0;
  void Add(Mask m) {
    again |= once & m;
    once |= m;
  }
  Mask Single() const { return once & ~again; }
};

// One chunk of code bytes (`rows` rows of `channels` bytes, row r at codes + r * channels) whose bits `high` hold
// a partial stage's prefix, top cells top_pos / top_neg in place: writes to `out` the in-chunk index
// r * channels + c of every value at a sampled row ((phase + r) % kAnchorSampleStride == 0) that is the only
// value of its channel in the top cell of its sign, in increasing order, and returns how many. `out` must hold
// 2 * channels entries (at most one per channel and sign). Portable (8 channels a 64-bit word), AVX2 (32 a
// vector) and AVX-512BW (64 a vector) versions; integer-exact, so all give the same list. Call the vector ones
// only on CPUs that have the instructions.
size_t RefChunkSampledSingles(const uint8_t* codes, int rows, int channels, uint8_t high, uint8_t top_pos,
                              uint8_t top_neg, int phase, uint32_t* out);
size_t Avx2ChunkSampledSingles(const uint8_t* codes, int rows, int channels, uint8_t high, uint8_t top_pos,
                               uint8_t top_neg, int phase, uint32_t* out);
size_t Avx512ChunkSampledSingles(const uint8_t* codes, int rows, int channels, uint8_t high, uint8_t top_pos,
                                 uint8_t top_neg, int phase, uint32_t* out);

// The values the rule rewrites decode at the chunk end, not at their cell's conditional mean, so the top cell's
// table entry should be the mean of the others: with them in it, the entry sits near 1 and every value that
// shares its top cell (the ones the table does decode) comes back too large (docs/CODEC.md "Version 2.1").
// For the partial stage that knows the top `known` bits of the `bits`-bit codes: subtracts from count[I]
// (MagnitudeHistogram's counts of magnitude codes I over the sampled values, lynx_math.h: tokens t %
// kAnchorSampleStride == 0 of the first AnchorSampledChannels channels; spikes already excluded) the magnitude
// code of every single top-cell value among them, unless it is its chunk-channel's spike. Integer counts, so
// every implementation gets the same table.
//
// The codes come either as token-major code bytes (`codes`), or, with codes == nullptr, as lynx's two packed
// 4-bit streams (`nibbles[0]` the anchor, `nibbles[1]` the residual; bits == 8, known == 4, channels even).
void ExcludeSingleExtremes(const uint8_t* codes, const uint8_t* const* nibbles, int bits, int known,
                           const LynxKernels& kernels, const LynxPageMeta& meta, uint64_t* count);

// Value i's code, from the same two forms: code bytes, or with codes == nullptr lynx's two packed 4-bit streams
// (MagnitudeHistogram and ExcludeSingleExtremes read the anchor tables' sample either way).
inline int CodeAt(const uint8_t* codes, const uint8_t* const* nibbles, size_t i) {
  return codes != nullptr ? codes[i] : (NibbleAt(nibbles[0], i) << 4) | NibbleAt(nibbles[1], i);
}

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_EXTREMES_H_
