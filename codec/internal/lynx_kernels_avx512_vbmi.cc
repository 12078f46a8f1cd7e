// AVX-512 VBMI fused 4-bit lynx paths (lynx_kernels_avx512_vbmi.h): byte permutes across two registers and
// multishift, 64 values per step. Compiled for the target with function attributes and only taken when the CPU
// reports VBMI, so the binary still runs on x86-64-v2.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own undefined-vector helpers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "codec/internal/lynx_kernels_avx512_vbmi.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "codec/internal/lynx_avx512_common.h"
#include "codec/internal/lynx_extremes.h"

namespace kvt::codec::internal {
namespace {

using avx512::Clamp;
using avx512::GuessCode;
using avx512::kLanes;

// ---- Fused 4-bit paths (AVX-512 VBMI: byte permutes across two registers, multishift) -------------------------

#define KVT_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))

bool VbmiAvailable() {
  static const bool available = __builtin_cpu_supports("avx512vbmi");
  return available;
}

// Up to 128 32-bit entries as four 128-byte planes (byte j of every entry), two registers each. A lookup takes
// the index replicated into all four bytes of its lane (vpermi2b reads 7 index bits, so bit 7 is ignored) and
// costs four byte permutes, each filling one byte of every lane.
struct BytePlaneTable {
  __m512i lo[4], hi[4];

  KVT_AVX512_VBMI BytePlaneTable(const uint32_t* entries, int n, uint32_t fill) {
    alignas(64) uint8_t planes[4][128];
    for (int i = 0; i < 128; ++i) {
      const uint32_t v = i < n ? entries[i] : fill;
      for (int j = 0; j < 4; ++j) planes[j][i] = static_cast<uint8_t>(v >> (8 * j));
    }
    for (int j = 0; j < 4; ++j) {
      lo[j] = _mm512_load_si512(planes[j]);
      hi[j] = _mm512_load_si512(planes[j] + 64);
    }
  }

  KVT_AVX512_VBMI __m512i operator()(__m512i index4) const {
    __m512i r = _mm512_mask2_permutex2var_epi8(lo[0], index4, 0x1111111111111111ull, hi[0]);
    r = _mm512_mask2_permutex2var_epi8(lo[1], r, 0x2222222222222222ull, hi[1]);  // byte 1's index is intact
    r = _mm512_mask2_permutex2var_epi8(lo[2], r, 0x4444444444444444ull, hi[2]);
    return _mm512_mask2_permutex2var_epi8(lo[3], r, 0x8888888888888888ull, hi[3]);
  }
};

// sel ? if1 : if0, bit by bit.
KVT_AVX512 inline __m512i Select(__m512i sel, __m512i if1, __m512i if0) {
  return _mm512_ternarylogic_epi32(sel, if1, if0, 0xCA);
}

// The magnitude code guess of CodesNibbles: kPoly the polynomial (tables.poly_guess_ok), else the log guess.
template <bool kPoly>
struct NibbleCoder {
  __m512 c0, c1, c2, c3;        // polynomial
  __m512 alpha, scale;          // log guess
  __m512 knee_slope, knee_offset;  // both, when `knee`
  bool knee;
  __m512i max_code, sign_code, bcast, one;
  __m512i small;                // kSmall: guess_high as one register
  BytePlaneTable high;

  KVT_AVX512_VBMI static std::array<uint32_t, 128> HighBits(const LynxTables& t) {
    std::array<uint32_t, 128> bits{};
    for (int f = 0; f <= t.max_code; ++f) std::memcpy(&bits[f], &t.guess_high[f], 4);
    return bits;
  }

  KVT_AVX512_VBMI explicit NibbleCoder(const LynxTables& t)
      : high(HighBits(t).data(), t.max_code + 1, 0x7F800000u) {
    c0 = _mm512_set1_ps(t.guess_poly[0]);
    c1 = _mm512_set1_ps(t.guess_poly[1]);
    c2 = _mm512_set1_ps(t.guess_poly[2]);
    c3 = _mm512_set1_ps(t.guess_poly[3]);
    alpha = _mm512_set1_ps(t.guess_alpha);
    knee_slope = _mm512_set1_ps(t.knee_slope);
    knee_offset = _mm512_set1_ps(t.knee_offset);
    knee = t.top_width > 0.0f;
    scale = _mm512_set1_ps(t.guess_scale);
    max_code = _mm512_set1_epi32(t.max_code);
    sign_code = _mm512_set1_epi32(1 << (t.bits - 1));
    bcast = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0);  // byte 0 of each dword to all four
    one = _mm512_set1_epi32(1);
    alignas(64) uint32_t first[16];
    const std::array<uint32_t, 128> bits = HighBits(t);
    for (int i = 0; i < 16; ++i) first[i] = i <= t.max_code ? bits[i] : 0x7F800000u;
    small = _mm512_load_si512(first);
  }

  // The b-bit codes of kN x 16 values from x[v * 16], mu[v * 16], inv[v * 16] (FinalValue, MagnitudeCode and
  // the sign, lane by lane), into c[0 .. kN). Each step runs on all kN vectors before the next, so the
  // out-of-order core sees kN independent operations side by side instead of kN long dependent chains one
  // after another. Requires sigma > 0 or x == mu in every lane (true without spike reserving: every value
  // lies in its chunk's interval), so that inv_sigma == 0 needs no special case: (x - mu) * 0 = 0.
  template <bool kSmall, int kN>
  KVT_AVX512_VBMI void Codes(const float* x, const float* mu, const float* inv, __m512i (&c)[4]) const {
    __m512 a[kN];
    __mmask16 neg[kN];
    __m512i f[kN];
#pragma GCC unroll 4
    for (int v = 0; v < kN; ++v) {
      const __m512 xf =
          _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + kLanes * v), _mm512_loadu_ps(mu + kLanes * v)),
                        _mm512_loadu_ps(inv + kLanes * v));
      neg[v] = _mm512_cmp_ps_mask(xf, _mm512_setzero_ps(), _CMP_LT_OQ);
      a[v] = _mm512_range_ps(xf, _mm512_set1_ps(1.0f), 0x0A);  // min(|xf|, 1), sign cleared
    }
    if constexpr (kPoly) {
      __m512 p[kN];
#pragma GCC unroll 4
      for (int v = 0; v < kN; ++v) p[v] = _mm512_fmadd_ps(a[v], c3, c2);
#pragma GCC unroll 4
      for (int v = 0; v < kN; ++v) p[v] = _mm512_fmadd_ps(a[v], p[v], c1);
#pragma GCC unroll 4
      for (int v = 0; v < kN; ++v) p[v] = _mm512_fmadd_ps(a[v], p[v], c0);
      if (knee) {  // the verified guess stays below M + 1: the line replaces the clamp
#pragma GCC unroll 4
        for (int v = 0; v < kN; ++v)
          f[v] = _mm512_cvttps_epi32(avx512::WithKnee(_mm512_mul_ps(a[v], p[v]), a[v], knee_slope, knee_offset));
      } else {
#pragma GCC unroll 4
        for (int v = 0; v < kN; ++v) f[v] = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_mul_ps(a[v], p[v])), max_code);
      }
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < kN; ++v) f[v] = GuessCode(a[v], alpha, scale, knee, knee_slope, knee_offset, max_code);
    }
    // a >= guess_high[f] compared as integers (both non-negative floats).
    __m512i th[kN];
#pragma GCC unroll 4
    for (int v = 0; v < kN; ++v)
      th[v] = kSmall ? _mm512_permutexvar_epi32(f[v], small) : high(_mm512_shuffle_epi8(f[v], bcast));
#pragma GCC unroll 4
    for (int v = 0; v < kN; ++v) {
      const __m512i code =
          _mm512_mask_add_epi32(f[v], _mm512_cmpge_epu32_mask(_mm512_castps_si512(a[v]), th[v]), f[v], one);
      c[v] = _mm512_mask_or_epi32(code, neg[v], code, sign_code);
    }
  }
};

// Four code vectors (64 values in lane order) -> their 64 code bytes in order.
KVT_AVX512_VBMI inline __m512i CodeBytes(const __m512i (&c)[4]) {
  const __m512i pick = _mm512_set_epi8(  // bytes 0, 4, .., 60 of the first operand, then of the second
      124, 120, 116, 112, 108, 104, 100, 96, 92, 88, 84, 80, 76, 72, 68, 64, 60, 56, 52, 48, 44, 40, 36, 32, 28, 24,
      20, 16, 12, 8, 4, 0, 124, 120, 116, 112, 108, 104, 100, 96, 92, 88, 84, 80, 76, 72, 68, 64, 60, 56, 52, 48, 44,
      40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
  const __m512i b01 = _mm512_permutex2var_epi8(c[0], pick, c[1]);
  const __m512i b23 = _mm512_permutex2var_epi8(c[2], pick, c[3]);
  return _mm512_inserti64x4(b01, _mm512_castsi512_si256(b23), 1);
}

// CodesNibbles for one guess and table form. 64 values per step (the last step of a row may hold 16, 32 or 48).
template <bool kPoly, bool kSmall>
KVT_AVX512_VBMI void CodesNibblesImpl(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables,
                                      uint8_t* const* streams) {
  const int channels = page.channels;
  const bool two_streams = tables.bits == 8;
  uint8_t* const lo_stream = two_streams ? streams[1] : streams[0];  // the code's low nibbles
  uint8_t* const hi_stream = streams[0];                              // its high nibbles, when bits == 8
  // Built out of line, then copied: the copy's address never escapes, so its tables stay in registers instead
  // of being reloaded after every store through the (may-alias) stream pointers.
  const NibbleCoder<kPoly> built(tables);
  const NibbleCoder<kPoly> coder = built;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i even = _mm512_set_epi8(  // even bytes of the first operand, then even bytes of the second
      126, 124, 122, 120, 118, 116, 114, 112, 110, 108, 106, 104, 102, 100, 98, 96, 94, 92, 90, 88, 86, 84, 82, 80,
      78, 76, 74, 72, 70, 68, 66, 64, 62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26, 24,
      22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  // The packed nibbles of 64 code bytes in channel order (the last, partial step of a row): the low stream's 32
  // bytes in the low half, the high stream's above.
  auto pack = [&](__m512i b) KVT_AVX512_VBMI {
    const __m512i w4 = _mm512_srli_epi16(b, 4);
    // Per 16-bit word (codes 2j, 2j + 1): the low byte of lo is their low nibbles, of hi their high nibbles.
    const __m512i lo = Select(nibble, b, w4);
    return _mm512_permutex2var_epi8(lo, even, two_streams ? Select(nibble, w4, _mm512_srli_epi16(b, 8)) : lo);
  };
  const int full_end = channels / 64 * 64;
  const __m512i keep = _mm512_set1_epi16(static_cast<int16_t>(0xF00F)), mid = _mm512_set1_epi16(0x00F0);
  alignas(64) uint8_t order[64];
  for (int w = 0; w < 32; ++w) {  // word w holds the codes of channels ch, ch + 1: stream byte ch / 2
    const int b = 2 * w;
    const int ch = 16 * ((b % 16) / 4) + 4 * (b / 16) + b % 4;
    order[ch / 2] = static_cast<uint8_t>(b);
    order[32 + ch / 2] = static_cast<uint8_t>(b + 1);
  }
  const __m512i unscramble = _mm512_load_si512(order);
  for (int t = 0; t < page.tokens; ++t) {
    const size_t k = static_cast<size_t>(t / meta.chunk_len) * channels;
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    const float* mu = meta.mu.data() + k;
    const float* inv = meta.inv_sigma.data() + k;
    const size_t out = static_cast<size_t>(t) * channels / 2;
    uint8_t* const lo_row = lo_stream + out;
    uint8_t* const hi_row = hi_stream + out;
    for (int c0 = 0; c0 < full_end; c0 += 64) {
      __m512i c[4];
      coder.template Codes<kSmall, 4>(row + c0, mu + c0, inv + c0, c);
      // In-lane packs: byte 16 L + 4 v + i of b is the code of channel c0 + 16 v + 4 L + i (codes of
      // neighbouring channels 2j, 2j + 1 share a 16-bit word, all the nibble packing needs).
      const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
      // Per word: low byte (low nibbles of both codes) for the low stream, high byte (high nibbles) for the
      // high one; then one byte permute puts the words' low bytes in channel order below their high bytes.
      const __m512i nib = Select(keep, b, Select(mid, _mm512_srli_epi16(b, 4), _mm512_slli_epi16(b, 4)));
      const __m512i packed = _mm512_permutexvar_epi8(unscramble, nib);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo_row + c0 / 2), _mm512_castsi512_si256(packed));
      if (two_streams) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi_row + c0 / 2),
                            _mm512_extracti64x4_epi64(packed, 1));
      }
    }
    if (full_end < channels) {  // 16, 32 or 48 channels left
      const int c0 = full_end;
      const int vectors = (channels - c0) / kLanes;
      __m512i c[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                      _mm512_setzero_si512()};
      for (int v = 0; v < vectors; ++v) {
        __m512i one[4];
        coder.template Codes<kSmall, 1>(row + c0 + kLanes * v, mu + c0 + kLanes * v, inv + c0 + kLanes * v,
                                        one);
        c[v] = one[0];
      }
      const __m512i b = CodeBytes(c);
      const __m512i packed = pack(b);
      const __mmask32 bytes = (1u << (8 * vectors)) - 1;
      _mm256_mask_storeu_epi8(lo_row + c0 / 2, bytes, _mm512_castsi512_si256(packed));
      if (two_streams) _mm256_mask_storeu_epi8(hi_row + c0 / 2, bytes, _mm512_extracti64x4_epi64(packed, 1));
    }
  }
}

KVT_AVX512_VBMI bool CodesNibblesVbmi(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables,
                                      uint8_t* const* streams) {
  if (!VbmiAvailable() || meta.spikes || page.channels % kLanes != 0) return false;
  if (tables.bits != 4 && tables.bits != 8) return false;
  const bool small = tables.max_code < 16;
  if (tables.poly_guess_ok) {
    small ? CodesNibblesImpl<true, true>(page, meta, tables, streams)
          : CodesNibblesImpl<true, false>(page, meta, tables, streams);
  } else if (tables.log_guess_ok) {
    small ? CodesNibblesImpl<false, true>(page, meta, tables, streams)
          : CodesNibblesImpl<false, false>(page, meta, tables, streams);
  } else {
    return false;
  }
  return true;
}

// Reconstruct (below) straight from one or two 4-bit streams. 64 values per step, as CodesNibbles.
KVT_AVX512_VBMI bool ReconstructNibblesVbmi(const uint8_t* const* streams, int stages, const LynxPageMeta& meta,
                                            const float* table, const float* exact_top, const MutablePageView& out) {
  const int channels = meta.channels;
  if (!VbmiAvailable() || channels % kLanes != 0 || stages < 1 || stages > 2) return false;
  const size_t half_row = static_cast<size_t>(channels) / 2;
  if (stages == 1) {
    // 16 entries: one register, indexed by the low 4 bits of each lane. Byte j of the stream holds values 2j
    // (low nibble) and 2j + 1 (high nibble): widen each byte to a qword, then pick bits 0.. and 4.. into the
    // two dwords.
    const __m512 signed_table = _mm512_loadu_ps(table);
    const __m512i split = _mm512_set1_epi64(0x0000000400000000ll);
    // The exact-extremes rule, blended in: at each chunk's first row its single top-cell rows per channel
    // (the nibble search), then in row r the lanes whose single row is r take +-top instead of the table value,
    // which the reconstruction below turns into exactly Reconstruct(+-top, ...), the rule's value.
    thread_local std::vector<int16_t> singles;
    if (exact_top != nullptr) singles.resize(2 * static_cast<size_t>(channels));
    int16_t* pos = singles.data();
    int16_t* neg = pos + channels;
    const __m512 top = _mm512_set1_ps(exact_top != nullptr ? *exact_top : 0.0f);
    const __m512 neg_top = _mm512_set1_ps(exact_top != nullptr ? -*exact_top : 0.0f);
    for (int t = 0; t < meta.tokens; ++t) {
      const size_t k = static_cast<size_t>(t / meta.chunk_len) * channels;
      const uint8_t* in = streams[0] + t * half_row;
      float* row = out.data + static_cast<size_t>(t) * out.stride();
      const int r = t % meta.chunk_len;
      if (exact_top != nullptr && r == 0) Avx512ChunkExtremesNibbles(in, meta.chunk_len, channels, pos, neg);
      const __m256i rv = _mm256_set1_epi16(static_cast<int16_t>(r));
      for (int c0 = 0; c0 < channels; c0 += kLanes) {
        const __m512i bytes = _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + c0 / 2)));
        __m512 v = _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(split, bytes), signed_table);
        if (exact_top != nullptr) {
          const __mmask16 p = _mm256_cmpeq_epi16_mask(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pos + c0)), rv);
          const __mmask16 n = _mm256_cmpeq_epi16_mask(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(neg + c0)), rv);
          v = _mm512_mask_mov_ps(_mm512_mask_mov_ps(v, p, top), n, neg_top);
        }
        const __m512 y = _mm512_add_ps(_mm512_loadu_ps(meta.mu.data() + k + c0),
                                       _mm512_mul_ps(_mm512_loadu_ps(meta.sigma.data() + k + c0), v));
        _mm512_storeu_ps(row + c0,
                         Clamp(y, _mm512_loadu_ps(meta.lo.data() + c0), _mm512_loadu_ps(meta.hi.data() + c0)));
      }
    }
    return true;
  }
  // Two streams: 256 signed entries, the upper half the negation of the lower. The magnitudes as byte planes,
  // looked up 64 codes at a time (one byte permute per plane), the sign (code bit 7) xored into plane 3, then the
  // planes interleaved into floats by unpacking bytes and words. Those unpacks leave lane L of float vector v
  // holding the code bytes at 16 L + 4 v .. + 3, so the codes are loaded in that (4 x 4 transposed) order.
  alignas(64) uint8_t planes[4][128];
  for (int i = 0; i < 128; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &table[i], 4);
    for (int j = 0; j < 4; ++j) planes[j][i] = static_cast<uint8_t>(bits >> (8 * j));
  }
  __m512i plane_lo[4], plane_hi[4];
  for (int j = 0; j < 4; ++j) {
    plane_lo[j] = _mm512_load_si512(planes[j]);
    plane_hi[j] = _mm512_load_si512(planes[j] + 64);
  }
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  // Word P = s1[j] | s0[j] << 8 from [s1 bytes | s0 bytes], j the code pair that byte 2 P must hold: code byte
  // b = 16 L + 4 v + i holds channel 16 v + 4 L + i.
  alignas(64) uint8_t order[64];
  for (int p = 0; p < 32; ++p) {
    const int b = 2 * p;
    const int channel = 16 * ((b % 16) / 4) + 4 * (b / 16) + b % 4;
    order[2 * p] = static_cast<uint8_t>(channel / 2);
    order[2 * p + 1] = static_cast<uint8_t>(32 + channel / 2);
  }
  const __m512i interleave = _mm512_load_si512(order);
  const __m512i keep = _mm512_set1_epi16(static_cast<int16_t>(0xF00F)), mid = _mm512_set1_epi16(0x0F00);
  for (int t = 0; t < meta.tokens; ++t) {
    const size_t k = static_cast<size_t>(t / meta.chunk_len) * channels;
    const uint8_t* s0 = streams[0] + t * half_row;
    const uint8_t* s1 = streams[1] + t * half_row;
    float* row = out.data + static_cast<size_t>(t) * out.stride();
    for (int c0 = 0; c0 < channels; c0 += 64) {
      const int vectors = std::min(4, (channels - c0) / kLanes);
      const __mmask32 in_bytes = vectors == 4 ? ~0u : (1u << (8 * vectors)) - 1;
      const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(in_bytes, s1 + c0 / 2)),
                                           _mm256_maskz_loadu_epi8(in_bytes, s0 + c0 / 2), 1);
      const __m512i w = _mm512_permutexvar_epi8(interleave, z);
      // Word P = code 2j | code 2j + 1 << 8: nibbles (s1 lo, s0 lo, s1 hi, s0 hi) from (s1 lo, s1 hi, s0 lo, s0 hi).
      const __m512i codes = Select(mid, _mm512_slli_epi16(w, 4), Select(keep, w, _mm512_srli_epi16(w, 4)));
      const __m512i b0 = _mm512_permutex2var_epi8(plane_lo[0], codes, plane_hi[0]);
      const __m512i b1 = _mm512_permutex2var_epi8(plane_lo[1], codes, plane_hi[1]);
      const __m512i b2 = _mm512_permutex2var_epi8(plane_lo[2], codes, plane_hi[2]);
      const __m512i b3 = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(plane_lo[3], codes, plane_hi[3]), codes,
                                                   sign, 0x78);  // a ^ (b & c)
      const __m512i lo01 = _mm512_unpacklo_epi8(b0, b1), hi01 = _mm512_unpackhi_epi8(b0, b1);
      const __m512i lo23 = _mm512_unpacklo_epi8(b2, b3), hi23 = _mm512_unpackhi_epi8(b2, b3);
      const __m512i vals[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                               _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
      for (int v = 0; v < vectors; ++v) {
        const int cv = c0 + kLanes * v;
        const __m512 val = _mm512_castsi512_ps(vals[v]);
        const __m512 y = _mm512_add_ps(_mm512_loadu_ps(meta.mu.data() + k + cv),
                                       _mm512_mul_ps(_mm512_loadu_ps(meta.sigma.data() + k + cv), val));
        _mm512_storeu_ps(row + cv, Clamp(y, _mm512_loadu_ps(meta.lo.data() + cv), _mm512_loadu_ps(meta.hi.data() + cv)));
      }
    }
  }
  return true;
}

// LynxKernels::pack_end_pairs for even widths up to 16 bits, 16 pairs at a time straight from q_low / q_high
// (2 E bytes a block, so every block starts on a byte): each qword's two indices joined into 2 E bits, each
// 128-bit lane's two qwords into 4 E bits (E / 2 whole bytes), those bytes gathered by one byte permute.
KVT_AVX512_VBMI bool PackEndsVbmi(const uint16_t* q_low, const uint16_t* q_high, size_t n, int bits, uint8_t* out) {
  if (!VbmiAvailable() || bits > 16 || bits % 2 != 0) return false;
  const int lane_bytes = bits / 2;
  alignas(64) uint8_t order[64] = {};
  for (int b = 0; b < 4 * lane_bytes; ++b) order[b] = static_cast<uint8_t>(16 * (b / lane_bytes) + b % lane_bytes);
  const __m512i compact = _mm512_load_si512(order);
  const __m512i field = _mm512_set1_epi64((int64_t{1} << bits) - 1);
  const __m512i field32 = _mm512_set1_epi32((1 << bits) - 1);
  const __m512i one = _mm512_set1_epi32(1);
  const size_t block = 2 * static_cast<size_t>(bits);  // bytes of 16 fields
  const __mmask64 store = (__mmask64{1} << block) - 1;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q_low + i)));
    const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q_high + i)));
    // Each index masked to its E bits as PackEndPairs does, then qword f0 | f1 << 32 -> f0 | f1 << E (f0 < 2^E <=
    // 2^(32 - E): the shift drops it).
    const __m512i index = _mm512_and_si512(
        _mm512_add_epi32(_mm512_srli_epi32(_mm512_mullo_epi32(hi, _mm512_add_epi32(hi, one)), 1), lo), field32);
    const __m512i pair = _mm512_or_si512(_mm512_and_si512(index, field), _mm512_srli_epi64(index, 32 - bits));
    const __m512i quad = _mm512_or_si512(pair, _mm512_slli_epi64(_mm512_bsrli_epi128(pair, 8), 2 * bits));
    _mm512_mask_storeu_epi8(out + i / kLanes * block, store, _mm512_permutexvar_epi8(compact, quad));
  }
  if (i < n) RefPackEndPairs(q_low + i, q_high + i, n - i, bits, out + i / kLanes * block);
  return true;
}

}  // namespace

bool PackNarrowEnds(const uint16_t* q_low, const uint16_t* q_high, size_t n, int bits, uint8_t* out) {
  return PackEndsVbmi(q_low, q_high, n, bits, out);
}

bool CodesNibbles(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables,
                  uint8_t* const* streams) {
  return CodesNibblesVbmi(page, meta, tables, streams);
}

bool ReconstructNibbles(const uint8_t* const* streams, int stages, const LynxPageMeta& meta, const float* table,
                        const float* exact_top, const MutablePageView& out) {
  return ReconstructNibblesVbmi(streams, stages, meta, table, exact_top, out);
}

}  // namespace kvt::codec::internal
