#include "kv/float16.h"

#include <cpuid.h>
#include <immintrin.h>

#define KVT_AVX2_F16C __attribute__((target("avx2,f16c")))

namespace kvt::kv {
namespace {

// The scalar conversions over an index, inlined into each path's function so that the compiler vectorizes
// them for that path's ISA. BUILD adds -ftree-vectorize: with it GCC 12 uses its "dynamic" cost model, which
// accepts a scalar epilogue; -O2 alone uses "very-cheap", which does not and leaves these loops scalar.

__attribute__((always_inline)) inline void Bf16ToFloatLoop(const uint8_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, sizeof(b));
    dst[i] = Bf16BitsToFloat(b);
  }
}

__attribute__((always_inline)) inline void FloatToBf16Loop(const float* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = FloatToBf16Bits(src[i]);
    std::memcpy(dst + 2 * i, &b, sizeof(b));
  }
}

__attribute__((always_inline)) inline void Fp16ToFloatLoop(const uint8_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof(h));
    dst[i] = Fp16BitsToFloat(h);
  }
}

__attribute__((always_inline)) inline void FloatToFp16Loop(const float* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToFp16Bits(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof(h));
  }
}

KVT_AVX2_F16C void Bf16ToFloatAvx2(const uint8_t* src, size_t n, float* dst) { Bf16ToFloatLoop(src, n, dst); }

KVT_AVX2_F16C void FloatToBf16Avx2(const float* src, size_t n, uint8_t* dst) { FloatToBf16Loop(src, n, dst); }

KVT_AVX2_F16C void Fp16ToFloatF16c(const uint8_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  Fp16ToFloatLoop(src + 2 * i, n - i, dst + i);
}

KVT_AVX2_F16C void FloatToFp16F16c(const float* src, size_t n, uint8_t* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
  FloatToFp16Loop(src + i, n - i, dst + 2 * i);
}

// AVX2 through the compiler (which also checks that the OS saves YMM state); F16C from CPUID leaf 1, as
// clang's __builtin_cpu_supports does not know it.
bool HasAvx2F16c() {
  static const bool available = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }();
  return available;
}

ConvertPath Best() { return HasAvx2F16c() ? ConvertPath::kAvx2F16c : ConvertPath::kPortable; }

}  // namespace

bool ConvertPathAvailable(ConvertPath path) { return path == ConvertPath::kPortable || HasAvx2F16c(); }

void Bf16ToFloatOn(ConvertPath path, const uint8_t* src, size_t n, float* dst) {
  path == ConvertPath::kAvx2F16c ? Bf16ToFloatAvx2(src, n, dst) : Bf16ToFloatLoop(src, n, dst);
}

void Fp16ToFloatOn(ConvertPath path, const uint8_t* src, size_t n, float* dst) {
  path == ConvertPath::kAvx2F16c ? Fp16ToFloatF16c(src, n, dst) : Fp16ToFloatLoop(src, n, dst);
}

void FloatToBf16On(ConvertPath path, const float* src, size_t n, uint8_t* dst) {
  path == ConvertPath::kAvx2F16c ? FloatToBf16Avx2(src, n, dst) : FloatToBf16Loop(src, n, dst);
}

void FloatToFp16On(ConvertPath path, const float* src, size_t n, uint8_t* dst) {
  path == ConvertPath::kAvx2F16c ? FloatToFp16F16c(src, n, dst) : FloatToFp16Loop(src, n, dst);
}

void Bf16ToFloat(const uint8_t* src, size_t n, float* dst) { Bf16ToFloatOn(Best(), src, n, dst); }
void Fp16ToFloat(const uint8_t* src, size_t n, float* dst) { Fp16ToFloatOn(Best(), src, n, dst); }
void FloatToBf16(const float* src, size_t n, uint8_t* dst) { FloatToBf16On(Best(), src, n, dst); }
void FloatToFp16(const float* src, size_t n, uint8_t* dst) { FloatToFp16On(Best(), src, n, dst); }

}  // namespace kvt::kv
