// IEEE binary16 (fp16) and bfloat16 <-> float32 conversions for moving engine KV blocks, one value at a time
// and in bulk. Narrowing rounds to nearest, ties to even; overflow gives +-inf, as IEEE does (unlike the
// codec's saturating formats in numerics/float16.h). A NaN stays NaN, made quiet, keeping as much of its payload
// as fits: bit for bit what x86's F16C instructions do, so every path below gives the same bytes. Pure
// functions; thread-safe.
//
//   kv::Bf16ToFloat(block_bytes, n, page_row);    // engine bytes (host order, any alignment) -> float
//   kv::FloatToFp16(page_row, n, block_bytes);
#ifndef KVT_KV_FLOAT16_H_
#define KVT_KV_FLOAT16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "numerics/bits.h"

namespace kvt::kv {

using numerics::BitsToFloat;
using numerics::FloatBits;

// Exact.
inline float Bf16BitsToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBf16Bits(float x) {
  const uint32_t u = FloatBits(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // carries into the exponent, up to inf
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded);
}

// Exact. Branch-free so that loops over it vectorize.
inline float Fp16BitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t body = static_cast<uint32_t>(h & 0x7FFFu) << 13;
  const uint32_t exp = body & 0x0F800000u;
  const uint32_t normal = body + 0x38000000u;  // rebias 15 -> 127
  const uint32_t quiet = (0u - static_cast<uint32_t>((body & 0x007FE000u) != 0)) & 0x00400000u;
  const uint32_t special = (normal + 0x38000000u) | quiet;  // inf / NaN: exponent 255; a NaN made quiet
  const uint32_t subnormal =
      FloatBits(BitsToFloat(normal + 0x00800000u) - 6.103515625e-05f);  // (1+m)2^-14 - 2^-14
  // Selects by mask, not ?: on values, so that GCC keeps the float subtraction unconditional.
  const uint32_t is_special = 0u - static_cast<uint32_t>(exp == 0x0F800000u);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exp == 0);
  const uint32_t bits =
      (special & is_special) | (subnormal & is_subnormal) | (normal & ~(is_special | is_subnormal));
  return BitsToFloat(bits | sign);
}

// Branch-free (every candidate is computed, one is selected) so that loops over it vectorize.
inline uint16_t FloatToFp16Bits(float x) {
  const uint32_t u = FloatBits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // |x| >= 2^-14: rebias 127 -> 15 and round the mantissa from 23 to 10 bits; a carry moves into the exponent
  // and past 65504 reaches 0x7C00 (inf). Unsigned wrap-around for other inputs is harmless: not selected.
  const uint32_t normal = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13;
  // |x| < 2^-14: adding 0.5 puts the fp16 subnormal quantum (2^-24) at the float's last mantissa bit, so the
  // FPU's own round-to-nearest-even does the rounding.
  const uint32_t subnormal = FloatBits(BitsToFloat(a) + 0.5f) - 0x3F000000u;
  // NaN -> quiet NaN with the payload's top bits; inf and |x| >= 2^16 -> inf.
  const uint32_t special = a > 0x7F800000u ? 0x7E00u | ((a >> 13) & 0x3FFu) : 0x7C00u;
  const uint32_t is_special = 0u - static_cast<uint32_t>(a >= 0x47800000u);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(a < 0x38800000u);
  const uint32_t bits =
      (special & is_special) | (subnormal & is_subnormal) | (normal & ~(is_special | is_subnormal));
  return static_cast<uint16_t>(bits | sign);
}

// Bulk conversions of `n` values, giving exactly the scalar functions' bits. Narrow values are 2 bytes each
// in host byte order at any alignment; `src` and `dst` must not overlap. They run on the best path this CPU
// has (chosen once per process).
void Bf16ToFloat(const uint8_t* src, size_t n, float* dst);
void Fp16ToFloat(const uint8_t* src, size_t n, float* dst);
void FloatToBf16(const float* src, size_t n, uint8_t* dst);
void FloatToFp16(const float* src, size_t n, uint8_t* dst);

// The bulk paths: kPortable (the scalar functions in loops the compiler vectorizes for the build's baseline
// ISA, x86-64-v2) and kAvx2F16c (the same loops built for AVX2, fp16 by the F16C instructions). On a Xeon,
// 256 Ki values from and to L2, portable -> AVX2/F16C: float to bf16 120 -> 70 us, bf16 to float 36 us on
// both (memory-bound), float to fp16 285 -> 39 us, fp16 to float 207 -> 42 us.
enum class ConvertPath { kPortable, kAvx2F16c };
bool ConvertPathAvailable(ConvertPath path);
// The bulk conversions on `path`, which must be available: for tests and benchmarks comparing paths.
void Bf16ToFloatOn(ConvertPath path, const uint8_t* src, size_t n, float* dst);
void Fp16ToFloatOn(ConvertPath path, const uint8_t* src, size_t n, float* dst);
void FloatToBf16On(ConvertPath path, const float* src, size_t n, uint8_t* dst);
void FloatToFp16On(ConvertPath path, const float* src, size_t n, uint8_t* dst);

}  // namespace kvt::kv

#endif  // KVT_KV_FLOAT16_H_
