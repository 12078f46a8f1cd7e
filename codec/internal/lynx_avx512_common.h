// Pieces shared by the AVX-512 lynx kernels (lynx_kernels_avx512.cc) and their VBMI fused 4-bit paths
// (lynx_kernels_avx512_vbmi.cc): the target attribute and small vector helpers. Internal to codec/internal.
#ifndef KVT_CODEC_INTERNAL_LYNX_AVX512_COMMON_H_
#define KVT_CODEC_INTERNAL_LYNX_AVX512_COMMON_H_

#include <immintrin.h>

#define KVT_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

namespace kvt::codec::internal::avx512 {

constexpr int kLanes = 16;

KVT_AVX512 inline __m512 Clamp(__m512 x, __m512 lo, __m512 hi) {
  return _mm512_min_ps(_mm512_max_ps(x, lo), hi);
}

// max(y, the knee's line at a) (lynx_math.h LynxTables::knee_slope): one fused multiply-add and a maximum.
KVT_AVX512 inline __m512 WithKnee(__m512 y, __m512 a, __m512 knee_slope, __m512 knee_offset) {
  return _mm512_max_ps(y, _mm512_fmadd_ps(a, knee_slope, knee_offset));
}

// floor(LogGuess) (lynx_math.h) in vector form, clamped to [0, M]: the code is this or one more when
// tables.log_guess_ok. alpha is tables.guess_alpha; `knee` says whether the tables have one (without, the
// line is -inf and its two operations are skipped).
KVT_AVX512 inline __m512i GuessCode(__m512 a, __m512 alpha, __m512 scale, bool knee, __m512 knee_slope,
                                    __m512 knee_offset, __m512i max_code) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 w = _mm512_add_ps(one, _mm512_mul_ps(alpha, a));
  const __m512 e = _mm512_getexp_ps(w);
  const __m512 m = _mm512_getmant_ps(w, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
  // u = (m - 1) / (m + 1) from the 14-bit reciprocal estimate: the guess tolerates its error (lynx_math.cc).
  const __m512 u = _mm512_mul_ps(_mm512_sub_ps(m, one), _mm512_rcp14_ps(_mm512_add_ps(m, one)));
  const __m512 u2 = _mm512_mul_ps(u, u);
  __m512 p = _mm512_add_ps(_mm512_set1_ps(1.0f / 3), _mm512_mul_ps(u2, _mm512_set1_ps(1.0f / 5)));
  p = _mm512_add_ps(one, _mm512_mul_ps(u2, p));
  const __m512 log2m = _mm512_mul_ps(_mm512_mul_ps(u, p), _mm512_set1_ps(2.8853900817779268f));  // 2 / ln 2
  __m512 y = _mm512_mul_ps(_mm512_add_ps(e, log2m), scale);
  if (knee) y = WithKnee(y, a, knee_slope, knee_offset);
  const __m512i f = _mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // floor
  return _mm512_min_epi32(_mm512_max_epi32(f, _mm512_setzero_si512()), max_code);
}

}  // namespace kvt::codec::internal::avx512

#endif  // KVT_CODEC_INTERNAL_LYNX_AVX512_COMMON_H_
