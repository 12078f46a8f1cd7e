// AVX-512 searches of the exact-extremes rule (lynx_extremes.h): 64 prefixes (or 128 nibbles) of a chunk's rows
// per vector, a chunk's rows folded into "seen once" / "seen again" masks and the last matching row. Channels past
// the last full vector run the portable loops. Compiled for the target with function attributes.

// GCC 12's own AVX-512 header trips -Wmaybe-uninitialized on every inlined _mm512_castsi512_si256 (its
// _mm256_undefined_pd() initialises a variable with itself, on purpose): a false positive inside the compiler's
// header that printed ~18 warnings into every first build. Silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/internal/lynx_avx512_common.h"
#include "codec/internal/lynx_extremes.h"
#include "codec/internal/lynx_math.h"

namespace kvt::codec::internal {
namespace {

// One sign's state over a chunk for 64 lanes: once = matched at least once, twice = at least twice, row = the
// last matching row.
struct LaneState {
  __mmask64 once = 0, twice = 0;
  __m512i row;
};

KVT_AVX512 inline void Fold(LaneState& s, __mmask64 match, __m512i r) {
  s.twice |= s.once & match;
  s.once |= match;
  s.row = _mm512_mask_mov_epi8(s.row, match, r);
}

// Lanes [32 half, 32 half + 32) of the state as int16 rows, kNoExtreme where not exactly one match.
KVT_AVX512 inline __m512i Rows16(const LaneState& s, int half) {
  const __m256i bytes = half == 0 ? _mm512_castsi512_si256(s.row) : _mm512_extracti64x4_epi64(s.row, 1);
  const __mmask32 single = static_cast<__mmask32>((s.once & ~s.twice) >> (32 * half));
  return _mm512_mask_mov_epi16(_mm512_set1_epi16(kNoExtreme), single, _mm512_cvtepu8_epi16(bytes));
}

}  // namespace

KVT_AVX512 void Avx512ChunkExtremes(const uint8_t* prefix, size_t row_stride, int rows, int channels,
                                    uint8_t top_pos, uint8_t top_neg, int16_t* pos, int16_t* neg) {
  const __m512i tp = _mm512_set1_epi8(static_cast<char>(top_pos));
  const __m512i tn = _mm512_set1_epi8(static_cast<char>(top_neg));
  int c = 0;
  for (; c + 64 <= channels; c += 64) {
    LaneState p{0, 0, _mm512_setzero_si512()}, n{0, 0, _mm512_setzero_si512()};
    for (int r = 0; r < rows; ++r) {
      const __m512i v = _mm512_loadu_si512(prefix + static_cast<size_t>(r) * row_stride + c);
      const __m512i rv = _mm512_set1_epi8(static_cast<char>(r));
      Fold(p, _mm512_cmpeq_epi8_mask(v, tp), rv);
      Fold(n, _mm512_cmpeq_epi8_mask(v, tn), rv);
    }
    for (int half = 0; half < 2; ++half) {
      _mm512_storeu_si512(pos + c + 32 * half, Rows16(p, half));
      _mm512_storeu_si512(neg + c + 32 * half, Rows16(n, half));
    }
  }
  if (c < channels) RefChunkExtremes(prefix + c, row_stride, rows, channels - c, top_pos, top_neg, pos + c, neg + c);
}

KVT_AVX512 void Avx512ChunkExtremesNibbles(const uint8_t* packed, int rows, int channels, int16_t* pos,
                                           int16_t* neg) {
  const size_t row_bytes = static_cast<size_t>(channels) / 2;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i top_pos = _mm512_set1_epi8(static_cast<char>(TopCellPositive(4)));
  const __m512i top_neg = _mm512_set1_epi8(static_cast<char>(TopCellNegative(4)));
  // Byte j of a row vector holds channels 2j (low nibble) and 2j + 1 (high): int16 lane i of the output takes
  // even lane i / 2 or odd lane i / 2 (index 32 + i / 2 of the pair), for each 32-lane half.
  alignas(64) int16_t interleave[32];
  for (int i = 0; i < 32; ++i) interleave[i] = static_cast<int16_t>((i & 1) * 32 + i / 2);
  const __m512i idx_lo = _mm512_load_si512(interleave);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  int c = 0;
  for (; c + 128 <= channels; c += 128) {
    LaneState ep{0, 0, _mm512_setzero_si512()}, en{0, 0, _mm512_setzero_si512()};  // even channels
    LaneState op{0, 0, _mm512_setzero_si512()}, on{0, 0, _mm512_setzero_si512()};  // odd channels
    for (int r = 0; r < rows; ++r) {
      const __m512i v = _mm512_loadu_si512(packed + static_cast<size_t>(r) * row_bytes + c / 2);
      const __m512i even = _mm512_and_si512(v, low4);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      const __m512i rv = _mm512_set1_epi8(static_cast<char>(r));
      Fold(ep, _mm512_cmpeq_epi8_mask(even, top_pos), rv);
      Fold(en, _mm512_cmpeq_epi8_mask(even, top_neg), rv);
      Fold(op, _mm512_cmpeq_epi8_mask(odd, top_pos), rv);
      Fold(on, _mm512_cmpeq_epi8_mask(odd, top_neg), rv);
    }
    // Even/odd lanes [32 half, 32 half + 32) cover channels c + 64 half .. + 64: two int16 vectors each.
    for (int half = 0; half < 2; ++half) {
      const __m512i pe = Rows16(ep, half), po = Rows16(op, half);
      const __m512i ne = Rows16(en, half), no = Rows16(on, half);
      int16_t* pd = pos + c + 64 * half;
      int16_t* nd = neg + c + 64 * half;
      _mm512_storeu_si512(pd, _mm512_permutex2var_epi16(pe, idx_lo, po));
      _mm512_storeu_si512(pd + 32, _mm512_permutex2var_epi16(pe, idx_hi, po));
      _mm512_storeu_si512(nd, _mm512_permutex2var_epi16(ne, idx_lo, no));
      _mm512_storeu_si512(nd + 32, _mm512_permutex2var_epi16(ne, idx_hi, no));
    }
  }
  if (c < channels) {
    // The remaining channels (fewer than 128, an even count) start at byte c / 2 of every row, rows still
    // row_bytes apart: the portable search over a dense copy of them.
    const int rest = channels - c;
    alignas(64) uint8_t dense[256 * 64];
    for (int r = 0; r < rows; ++r) {
      const uint8_t* src = packed + static_cast<size_t>(r) * row_bytes + c / 2;
      for (int b = 0; b < rest / 2; ++b) dense[r * (rest / 2) + b] = src[b];
    }
    RefChunkExtremesNibbles(dense, rows, rest, pos + c, neg + c);
  }
}

KVT_AVX512 void Avx512ApplyChunkExtremes(const int16_t* pos, const int16_t* neg, int k, float top,
                                         const LynxPageMeta& meta, const MutablePageView& out) {
  const int t0 = k * meta.chunk_len;
  const size_t base = static_cast<size_t>(k) * meta.channels;
  const __m512 v_pos = _mm512_set1_ps(top), v_neg = _mm512_set1_ps(-top);
  // Output offsets (t0 + row) * stride + c in floats: a page holds under 2^26 values, so int32 suffices.
  const __m512i stride = _mm512_set1_epi32(static_cast<int>(out.stride()));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i t = _mm512_set1_epi32(t0);
  const __m256i none = _mm256_set1_epi16(kNoExtreme);
  // The values and offsets of the singles, compressed into a list and stored in one predictable loop (scattered
  // stores of half-empty vectors cost several times more).
  constexpr int kBatch = 512;
  alignas(64) float value[kBatch + 32];
  alignas(64) int32_t offset[kBatch + 32];
  int n = 0;
  auto flush = [&] {
    for (int i = 0; i < n; ++i) out.data[offset[i]] = value[i];
    n = 0;
  };
  auto add = [&](__mmask16 m, __m512 y, __m256i rows, __m512i col) KVT_AVX512 {
    const __m512i at = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_add_epi32(t, _mm512_cvtepi16_epi32(rows)), stride), col);
    _mm512_storeu_ps(value + n, _mm512_maskz_compress_ps(m, y));
    _mm512_storeu_si512(offset + n, _mm512_maskz_compress_epi32(m, at));
    n += __builtin_popcount(m);
  };
  int c = 0;
  for (; c + 16 <= meta.channels; c += 16) {
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pos + c));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(neg + c));
    const __mmask16 mp = _mm256_cmpneq_epi16_mask(p, none);
    const __mmask16 mq = _mm256_cmpneq_epi16_mask(q, none);
    if ((mp | mq) == 0) continue;
    const __m512 mu = _mm512_loadu_ps(meta.mu.data() + base + c);
    const __m512 sigma = _mm512_loadu_ps(meta.sigma.data() + base + c);
    const __m512 lo = _mm512_loadu_ps(meta.lo.data() + c);
    const __m512 hi = _mm512_loadu_ps(meta.hi.data() + c);
    const __m512i col = _mm512_add_epi32(lane, _mm512_set1_epi32(c));
    // Reconstruct (lynx_math.h): mu + sigma * v, clamped to the channel's [lo, hi].
    add(mp, avx512::Clamp(_mm512_add_ps(mu, _mm512_mul_ps(sigma, v_pos)), lo, hi), p, col);
    add(mq, avx512::Clamp(_mm512_add_ps(mu, _mm512_mul_ps(sigma, v_neg)), lo, hi), q, col);
    if (n >= kBatch) flush();
  }
  flush();
  if (c < meta.channels) RefApplyChunkExtremesRange(pos, neg, k, top, meta, out, c, meta.channels);
}

KVT_AVX512 size_t Avx512ChunkSampledSingles(const uint8_t* codes, int rows, int channels, uint8_t high,
                                            uint8_t top_pos, uint8_t top_neg, int phase, uint32_t* out) {
  const __m512i h = _mm512_set1_epi8(static_cast<char>(high));
  const __m512i tp = _mm512_set1_epi8(static_cast<char>(top_pos));
  const __m512i tn = _mm512_set1_epi8(static_cast<char>(top_neg));
  const size_t row_bytes = static_cast<size_t>(channels);
  const int first_sampled = FirstSampledRow(phase);
  const int blocks = (channels + 63) / 64;
  // Row r's prefixes of the 64-channel block b (bytes past the row's end: masked out of every compare).
  auto prefixes = [&](int r, int b, __mmask64& lanes) KVT_AVX512 {
    const int c0 = 64 * b;
    lanes = channels - c0 >= 64 ? ~__mmask64{0} : (__mmask64{1} << (channels - c0)) - 1;
    return _mm512_and_si512(_mm512_maskz_loadu_epi8(lanes, codes + r * row_bytes + c0), h);
  };
  // Pass 1, per block: "seen once" / "seen again" masks over the chunk's rows.
  thread_local std::vector<__mmask64> singles;  // per block: positive then negative single masks
  singles.resize(2 * static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) {
    SeenMasks<__mmask64> seen_p, seen_n;
    for (int r = 0; r < rows; ++r) {
      __mmask64 lanes;
      const __m512i x = prefixes(r, b, lanes);
      seen_p.Add(_mm512_mask_cmpeq_epi8_mask(lanes, x, tp));
      seen_n.Add(_mm512_mask_cmpeq_epi8_mask(lanes, x, tn));
    }
    singles[2 * b] = seen_p.Single();
    singles[2 * b + 1] = seen_n.Single();
  }
  // Pass 2, the sampled rows in order: their values that are single.
  size_t n = 0;
  for (int r = first_sampled; r < rows; r += kAnchorSampleStride) {
    for (int b = 0; b < blocks; ++b) {
      if ((singles[2 * b] | singles[2 * b + 1]) == 0) continue;
      __mmask64 lanes;
      const __m512i x = prefixes(r, b, lanes);
      __mmask64 m = (_mm512_mask_cmpeq_epi8_mask(lanes, x, tp) & singles[2 * b]) |
                    (_mm512_mask_cmpeq_epi8_mask(lanes, x, tn) & singles[2 * b + 1]);
      for (; m != 0; m &= m - 1) out[n++] = static_cast<uint32_t>(r * row_bytes + 64 * b + __builtin_ctzll(m));
    }
  }
  return n;
}

}  // namespace kvt::codec::internal
