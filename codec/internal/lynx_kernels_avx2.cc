// AVX2 lynx inner loops: 8 channels per vector, tokens in order, the reference's float ops lane by lane (no
// FMA). Channels past the last full vector run the reference loops. Compiled for the target with function
// attributes and only called after ImplAvailable(kAvx2).
#include <immintrin.h>

#include <cmath>

#include <limits>
#include <vector>

#include "codec/internal/lynx_extremes.h"
#include "codec/internal/lynx_frame_spikes.h"
#include "codec/internal/lynx_kernels.h"

namespace kvt::codec::internal {
namespace {

#define KVT_AVX2 __attribute__((target("avx2")))

constexpr int kLanes = 8;

KVT_AVX2 inline __m256 Clamp(__m256 x, __m256 lo, __m256 hi) { return _mm256_min_ps(_mm256_max_ps(x, lo), hi); }

KVT_AVX2 inline void StoreBytes(uint8_t* out, __m256i v) {  // 8 x int32 in 0..255 -> 8 bytes
  const __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(p16, p16));
}

// Per chunk-channel minimum, maximum and target centre vectorized; the ends are quantized by the shared scalar
// QuantizeChunkRange (a few searches per 32 values).
KVT_AVX2 bool AllFinite(const PageView& page);

KVT_AVX2 bool Stats(const PageView& page, Centering centering, LynxPageMeta& meta) {
  if (!AllFinite(page)) return false;
  const int channels = page.channels;
  const int full = channels / kLanes * kLanes;
  const int n = meta.chunk_len;
  const __m256 inv_n = _mm256_set1_ps(1.0f / static_cast<float>(n));
  const __m256 half_f = _mm256_set1_ps(0.5f);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const size_t chunk_values = static_cast<size_t>(meta.num_chunks) * channels;
  std::vector<float> cmin_all(chunk_values), cmax_all(chunk_values), centre_all(chunk_values);
  for (int c0 = 0; c0 < full; c0 += kLanes) {
    __m256 lo = inf, hi = ninf;
    for (int k = 0; k < meta.num_chunks; ++k) {
      __m256 cmin = inf, cmax = ninf, sum = zero;
      const float* base = page.data + static_cast<size_t>(k) * n * page.stride() + c0;
      for (int t = 0; t < n; ++t) {
        const __m256 x = _mm256_loadu_ps(base + static_cast<size_t>(t) * page.stride());
        cmin = _mm256_min_ps(cmin, x);
        cmax = _mm256_max_ps(cmax, x);
        if (centering == Centering::kMean) sum = _mm256_add_ps(sum, _mm256_mul_ps(x, inv_n));
      }
      const __m256 centre = centering == Centering::kMidrange
                                ? _mm256_add_ps(_mm256_mul_ps(half_f, cmin), _mm256_mul_ps(half_f, cmax))
                                : sum;
      const size_t i = static_cast<size_t>(k) * channels + c0;
      _mm256_storeu_ps(&cmin_all[i], cmin);
      _mm256_storeu_ps(&cmax_all[i], cmax);
      _mm256_storeu_ps(&centre_all[i], Clamp(centre, cmin, cmax));
      lo = _mm256_min_ps(lo, cmin);
      hi = _mm256_max_ps(hi, cmax);
    }
    lo = _mm256_and_ps(lo, _mm256_cmp_ps(lo, zero, _CMP_NEQ_OQ));  // canonical +0
    hi = _mm256_and_ps(hi, _mm256_cmp_ps(hi, zero, _CMP_NEQ_OQ));
    _mm256_storeu_ps(meta.lo.data() + c0, lo);
    _mm256_storeu_ps(meta.hi.data() + c0, hi);
  }
  QuantizeChunkRange(meta, centering, cmin_all.data(), cmax_all.data(), centre_all.data(), 0, full);
  if (full < channels) RefStatsRange(page, centering, meta, full, channels);
  return true;
}

KVT_AVX2 void Codes(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes) {
  const int channels = page.channels;
  const int full = channels / kLanes * kLanes;
  const __m256 one = _mm256_set1_ps(1.0f), minus_one = _mm256_set1_ps(-1.0f);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 buckets = _mm256_set1_ps(static_cast<float>(tables.bucket_count));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign_code = _mm256_set1_epi32(1 << (tables.bits - 1));
  const int* bucket_base = tables.bucket_base.data();
  const float* thresholds = tables.padded_thresholds.data();
  const int corrections = tables.corrections;
  for (int t = 0; t < page.tokens; ++t) {
    const int k = t / meta.chunk_len;
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    const float* mu_row = meta.mu.data() + static_cast<size_t>(k) * channels;
    const float* inv_row = meta.inv_sigma.data() + static_cast<size_t>(k) * channels;
    uint8_t* out = codes + static_cast<size_t>(t) * channels;
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const __m256 x = _mm256_loadu_ps(row + c0);
      const __m256 mu = _mm256_loadu_ps(mu_row + c0);
      const __m256 inv = _mm256_loadu_ps(inv_row + c0);
      __m256 xf = _mm256_mul_ps(_mm256_sub_ps(x, mu), inv);
      xf = _mm256_min_ps(_mm256_max_ps(xf, minus_one), one);
      xf = _mm256_and_ps(xf, _mm256_cmp_ps(inv, zero, _CMP_NEQ_OQ));
      const __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(xf, zero, _CMP_LT_OQ));
      const __m256 a = _mm256_and_ps(xf, abs_mask);
      const __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(a, buckets));
      const __m256i base = _mm256_i32gather_epi32(bucket_base, j, 4);
      __m256i code = base;
      for (int i = 1; i <= corrections; ++i) {
        const __m256 th = _mm256_i32gather_ps(thresholds, _mm256_add_epi32(base, _mm256_set1_epi32(i)), 4);
        // a >= th gives all ones (-1): subtracting adds one.
        code = _mm256_sub_epi32(code, _mm256_castps_si256(_mm256_cmp_ps(a, th, _CMP_GE_OQ)));
      }
      code = _mm256_or_si256(code, _mm256_and_si256(neg, sign_code));
      StoreBytes(out + c0, code);
    }
  }
  if (full < channels) RefCodesRange(page, meta, tables, codes, full, channels);
}

KVT_AVX2 void Reconstruct(const uint8_t* prefix, const LynxPageMeta& meta, const float* table, int /*known*/,
                          const MutablePageView& out) {
  const int channels = meta.channels;
  const int full = channels / kLanes * kLanes;
  for (int t = 0; t < meta.tokens; ++t) {
    const int k = t / meta.chunk_len;
    const float* mu_row = meta.mu.data() + static_cast<size_t>(k) * channels;
    const float* sigma_row = meta.sigma.data() + static_cast<size_t>(k) * channels;
    const uint8_t* in = prefix + static_cast<size_t>(t) * channels;
    float* row = out.data + static_cast<size_t>(t) * out.stride();
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + c0)));
      const __m256 v = _mm256_i32gather_ps(table, idx, 4);
      const __m256 y = _mm256_add_ps(_mm256_loadu_ps(mu_row + c0), _mm256_mul_ps(_mm256_loadu_ps(sigma_row + c0), v));
      _mm256_storeu_ps(row + c0, Clamp(y, _mm256_loadu_ps(meta.lo.data() + c0), _mm256_loadu_ps(meta.hi.data() + c0)));
    }
  }
  if (full < channels) RefReconstructRange(prefix, meta, table, out, full, channels);
}

KVT_AVX2 bool AllFinite(const PageView& page) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
  const int full = page.channels / kLanes * kLanes;
  for (int t = 0; t < page.tokens; ++t) {
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    __m256i bad = _mm256_setzero_si256();
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const __m256i e = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c0)), exp_mask);
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp_mask));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
    for (int c = full; c < page.channels; ++c) {
      if (!std::isfinite(row[c])) return false;
    }
  }
  return true;
}

}  // namespace

const LynxKernels& Avx2LynxKernels() {
  static const LynxKernels k{Stats,       Codes,          Reconstruct, AllFinite, DeriveLynxMeta,
                             RefEndPairs, UnpackEndPairs, RefPackEndPairs, nullptr, nullptr,
                             RefChunkExtremes, RefApplyChunkExtremes,
                             Avx2ChunkSampledSingles,
                             nullptr};
  return k;
}

}  // namespace kvt::codec::internal
