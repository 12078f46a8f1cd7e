#include "codec/internal/bitpack.h"

// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized on _mm512_cvtepi16_epi8 (its _mm256_undefined_si256()
// initialises a variable with itself, on purpose): a false positive inside the compiler's header. Silenced for
// this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace kvt::codec::internal {

void PackFieldPortable(const uint8_t* codes, size_t n, int shift, int width, uint8_t* out) {
  const uint32_t mask = (1u << width) - 1;
  if (width == 8) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(codes[i] >> shift);
    return;
  }
  if (width == 4) {
    size_t pairs = n / 2;
    for (size_t i = 0; i < pairs; ++i) {
      uint32_t lo = (codes[2 * i] >> shift) & mask;
      uint32_t hi = (codes[2 * i + 1] >> shift) & mask;
      out[i] = static_cast<uint8_t>(lo | (hi << 4));
    }
    if (n & 1) out[pairs] = static_cast<uint8_t>((codes[n - 1] >> shift) & mask);
    return;
  }
  uint64_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>((codes[i] >> shift) & mask) << bits;
    bits += width;
    if (bits >= 32) {
      uint32_t word = static_cast<uint32_t>(acc);
      std::memcpy(out + o, &word, 4);
      o += 4;
      acc >>= 32;
      bits -= 32;
    }
  }
  while (bits > 0) {
    out[o++] = static_cast<uint8_t>(acc);
    acc >>= 8;
    bits -= 8;
  }
}

void AppendFieldPortable(const uint8_t* in, size_t n, int width, bool first, uint8_t* prefix) {
  const uint32_t mask = (1u << width) - 1;
  auto put = [&](size_t i, uint32_t field) {
    prefix[i] = first ? static_cast<uint8_t>(field) : static_cast<uint8_t>((prefix[i] << width) | field);
  };
  if (width == 8) {
    for (size_t i = 0; i < n; ++i) put(i, in[i]);
    return;
  }
  if (width == 4) {
    size_t pairs = n / 2;
    for (size_t i = 0; i < pairs; ++i) {
      put(2 * i, in[i] & 15);
      put(2 * i + 1, in[i] >> 4);
    }
    if (n & 1) put(n - 1, in[pairs] & 15);
    return;
  }
  const size_t bytes = PackedSize(n, width);
  uint64_t acc = 0;
  int bits = 0;
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    while (bits < width) {
      acc |= static_cast<uint64_t>(pos < bytes ? in[pos] : 0) << bits;
      ++pos;
      bits += 8;
    }
    put(i, static_cast<uint32_t>(acc) & mask);
    acc >>= width;
    bits -= width;
  }
}

bool Bmi2Available() {
  static const bool available = __builtin_cpu_supports("bmi2");
  return available;
}

// Eight values at a time: their fields, one per byte of a 64-bit word, are the word's bits under lane_mask, and
// 8 fields of `width` bits are exactly `width` bytes of the stream (8 * width bits, byte aligned).
__attribute__((target("bmi2"))) void PackFieldBmi2(const uint8_t* codes, size_t n, int shift, int width,
                                                    uint8_t* out) {
  const uint64_t lane_mask = ((uint64_t{1} << width) - 1) * 0x0101010101010101ull;
  // Groups whose 8-byte store stays inside the output; the rest (at most 8 / width + 1 groups and the n % 8
  // tail, byte aligned) go through the portable loop.
  const size_t out_size = PackedSize(n, width);
  const size_t groups = std::min(n / 8, out_size >= 8 ? (out_size - 8) / width + 1 : 0);
  for (size_t g = 0; g < groups; ++g) {
    uint64_t x;
    std::memcpy(&x, codes + 8 * g, 8);
    // Bits shifted down from the next byte land above the field and are masked off (shift + width <= 8).
    const uint64_t fields = width == 8 ? (x >> shift) & lane_mask : _pext_u64(x >> shift, lane_mask);
    std::memcpy(out + g * width, &fields, 8);  // the bytes past `width` are rewritten by the next group
  }
  if (8 * groups < n) PackFieldPortable(codes + 8 * groups, n - 8 * groups, shift, width, out + groups * width);
}

__attribute__((target("bmi2"))) void AppendFieldBmi2(const uint8_t* in, size_t n, int width, bool first,
                                                      uint8_t* prefix) {
  const uint64_t lane_mask = ((uint64_t{1} << width) - 1) * 0x0101010101010101ull;
  const size_t in_size = PackedSize(n, width);
  const size_t groups = std::min(n / 8, in_size >= 8 ? (in_size - 8) / width + 1 : 0);
  const uint64_t keep = width == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t bits;
    std::memcpy(&bits, in + g * width, 8);
    bits &= keep;
    const uint64_t fields = width == 8 ? bits : _pdep_u64(bits, lane_mask);
    uint64_t p = 0;
    if (!first) {
      std::memcpy(&p, prefix + 8 * g, 8);
      p <<= width;  // each byte's prefix has at most 8 - width bits, so nothing crosses into the next byte
    }
    p |= fields;
    std::memcpy(prefix + 8 * g, &p, 8);
  }
  if (8 * groups < n) AppendFieldPortable(in + groups * width, n - 8 * groups, width, first, prefix + 8 * groups);
}

bool Avx512BwAvailable() {
  static const bool available = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("bmi2");
  return available;
}

// Nibble fields with AVX-512BW: 64 codes (32 16-bit pairs) -> 32 packed bytes per step.
__attribute__((target("avx512f,avx512bw,bmi2"))) void PackNibblesAvx512(const uint8_t* codes, size_t n, int shift,
                                                                         uint8_t* out) {
  const size_t steps = n / 64;
  const __m128i lo_shift = _mm_cvtsi32_si128(shift), hi_shift = _mm_cvtsi32_si128(shift + 4);
  const __m512i lo_mask = _mm512_set1_epi16(0x000F), hi_mask = _mm512_set1_epi16(0x00F0);
  for (size_t i = 0; i < steps; ++i) {
    const __m512i w = _mm512_loadu_si512(codes + 64 * i);  // word j = code[2j] | code[2j + 1] << 8
    const __m512i lo = _mm512_and_si512(_mm512_srl_epi16(w, lo_shift), lo_mask);
    const __m512i hi = _mm512_and_si512(_mm512_srl_epi16(w, hi_shift), hi_mask);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * i), _mm512_cvtepi16_epi8(_mm512_or_si512(lo, hi)));
  }
  if (64 * steps < n) PackFieldBmi2(codes + 64 * steps, n - 64 * steps, shift, 4, out + 32 * steps);
}

__attribute__((target("avx512f,avx512bw,bmi2"))) void AppendNibblesAvx512(const uint8_t* in, size_t n, bool first,
                                                                           uint8_t* prefix) {
  const size_t steps = n / 64;
  const __m512i lo_mask = _mm512_set1_epi16(0x000F), hi_mask = _mm512_set1_epi16(0x0F00);
  for (size_t i = 0; i < steps; ++i) {
    const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32 * i)));
    // Byte 2j gets the low nibble of input byte j, byte 2j + 1 its high nibble.
    __m512i fields = _mm512_or_si512(_mm512_and_si512(w, lo_mask), _mm512_and_si512(_mm512_slli_epi16(w, 4), hi_mask));
    if (!first) {
      // Each prefix byte is below 16 here, so a 16-bit shift by 4 keeps every byte's bits inside it.
      const __m512i p = _mm512_loadu_si512(prefix + 64 * i);
      fields = _mm512_or_si512(_mm512_slli_epi16(p, 4), fields);
    }
    _mm512_storeu_si512(prefix + 64 * i, fields);
  }
  if (64 * steps < n) AppendFieldBmi2(in + 32 * steps, n - 64 * steps, 4, first, prefix + 64 * steps);
}

void PackField(const uint8_t* codes, size_t n, int shift, int width, uint8_t* out) {
  if (width == 4 && Avx512BwAvailable()) {
    PackNibblesAvx512(codes, n, shift, out);
  } else if (Bmi2Available()) {
    PackFieldBmi2(codes, n, shift, width, out);
  } else {
    PackFieldPortable(codes, n, shift, width, out);
  }
}

void AppendField(const uint8_t* in, size_t n, int width, bool first, uint8_t* prefix) {
  if (width == 4 && Avx512BwAvailable()) {
    AppendNibblesAvx512(in, n, first, prefix);
  } else if (Bmi2Available()) {
    AppendFieldBmi2(in, n, width, first, prefix);
  } else {
    AppendFieldPortable(in, n, width, first, prefix);
  }
}

}  // namespace kvt::codec::internal
