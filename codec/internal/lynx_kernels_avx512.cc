// AVX-512 (F, BW, DQ, VL) lynx inner loops: 16 channels per vector, tokens in order, the reference's float ops
// lane by lane. Channels past the last full vector run the reference loops. Compiled for the target with
// function attributes and only called after ImplAvailable(kAvx512), so the binary still runs on x86-64-v2.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own undefined-vector helpers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "codec/internal/lynx_kernels.h"

namespace kvt::codec::internal {
namespace {

#define KVT_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

constexpr int kLanes = 16;

KVT_AVX512 inline __m512 Clamp(__m512 x, __m512 lo, __m512 hi) {
  return _mm512_min_ps(_mm512_max_ps(x, lo), hi);
}

KVT_AVX512 void Stats(const PageView& page, Centering centering, LynxPageMeta& meta) {
  const int channels = page.channels;
  const int full = channels / kLanes * kLanes;
  const int n = meta.chunk_len;
  const __m512 inv_n = _mm512_set1_ps(1.0f / static_cast<float>(n));
  const __m512 half_f = _mm512_set1_ps(0.5f);
  const __m512 one = _mm512_set1_ps(1.0f), minus_one = _mm512_set1_ps(-1.0f);
  const __m512 k127 = _mm512_set1_ps(127.0f);
  const __m512 zero = _mm512_setzero_ps();
  const float* sigma_scale = SigmaScaleTable().data();
  // Per-chunk statistics of the current channel block, kLanes floats per chunk.
  std::vector<float> cmin_v(meta.num_chunks * kLanes), cmax_v(cmin_v.size()), centre_v(cmin_v.size());
  for (int c0 = 0; c0 < full; c0 += kLanes) {
    __m512 lo = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    __m512 hi = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int k = 0; k < meta.num_chunks; ++k) {
      __m512 cmin = _mm512_set1_ps(std::numeric_limits<float>::infinity());
      __m512 cmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      __m512 sum = zero;
      const float* base = page.data + static_cast<size_t>(k) * n * page.stride() + c0;
      for (int t = 0; t < n; ++t) {
        const __m512 x = _mm512_loadu_ps(base + static_cast<size_t>(t) * page.stride());
        cmin = _mm512_min_ps(cmin, x);
        cmax = _mm512_max_ps(cmax, x);
        if (centering == Centering::kMean) sum = _mm512_add_ps(sum, _mm512_mul_ps(x, inv_n));
      }
      const __m512 centre = centering == Centering::kMidrange
                                ? _mm512_add_ps(_mm512_mul_ps(half_f, cmin), _mm512_mul_ps(half_f, cmax))
                                : sum;
      _mm512_storeu_ps(&cmin_v[k * kLanes], cmin);
      _mm512_storeu_ps(&cmax_v[k * kLanes], cmax);
      _mm512_storeu_ps(&centre_v[k * kLanes], Clamp(centre, cmin, cmax));
      lo = _mm512_min_ps(lo, cmin);
      hi = _mm512_max_ps(hi, cmax);
    }
    // Canonical zeros (+0), then the frames in double exactly as MakeChannelFrame.
    lo = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(lo, zero, _CMP_NEQ_OQ), lo);
    hi = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(hi, zero, _CMP_NEQ_OQ), hi);
    _mm512_storeu_ps(meta.lo.data() + c0, lo);
    _mm512_storeu_ps(meta.hi.data() + c0, hi);
    const __m512d lo_a = _mm512_cvtps_pd(_mm512_castps512_ps256(lo));
    const __m512d lo_b = _mm512_cvtps_pd(_mm512_extractf32x8_ps(lo, 1));
    const __m512d hi_a = _mm512_cvtps_pd(_mm512_castps512_ps256(hi));
    const __m512d hi_b = _mm512_cvtps_pd(_mm512_extractf32x8_ps(hi, 1));
    const __m512d half_d = _mm512_set1_pd(0.5);
    const __m512 fc = _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_mul_pd(_mm512_add_pd(lo_a, hi_a), half_d))),
        _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_add_pd(lo_b, hi_b), half_d)), 1);
    const __m512 fh = _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_mul_pd(_mm512_sub_pd(hi_a, lo_a), half_d))),
        _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_sub_pd(hi_b, lo_b), half_d)), 1);
    const __mmask16 flat_channel = _mm512_cmp_ps_mask(fh, zero, _CMP_EQ_OQ);
    for (int k = 0; k < meta.num_chunks; ++k) {
      // QuantizeMu
      __m512 u = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(&centre_v[k * kLanes]), fc), fh);
      u = _mm512_min_ps(_mm512_max_ps(u, minus_one), one);
      __m512 q = _mm512_roundscale_ps(_mm512_add_ps(_mm512_mul_ps(u, k127), k127),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm512_mask_mov_ps(q, flat_channel, zero);
      // ChunkMu
      const __m512 off = _mm512_div_ps(_mm512_sub_ps(q, k127), k127);
      const __m512 mu = Clamp(_mm512_add_ps(fc, _mm512_mul_ps(fh, off)), lo, hi);
      // QuantizeSigma
      const __m512 need = _mm512_max_ps(_mm512_sub_ps(_mm512_loadu_ps(&cmax_v[k * kLanes]), mu), _mm512_sub_ps(mu, _mm512_loadu_ps(&cmin_v[k * kLanes])));
      __m512i pos = _mm512_setzero_si512();
      for (int step = 128; step >= 1; step >>= 1) {
        const __m512i cand = _mm512_add_epi32(pos, _mm512_set1_epi32(step));
        const __m512 s = _mm512_i32gather_ps(cand, sigma_scale, 4);
        const __mmask16 below = _mm512_cmp_ps_mask(_mm512_mul_ps(fh, s), need, _CMP_LT_OQ);
        pos = _mm512_mask_mov_epi32(pos, below, cand);
      }
      __m512i qs = _mm512_min_epi32(_mm512_add_epi32(pos, _mm512_set1_epi32(1)), _mm512_set1_epi32(255));
      const __mmask16 covered = _mm512_cmp_ps_mask(need, zero, _CMP_GT_OQ) & ~flat_channel;
      qs = _mm512_maskz_mov_epi32(covered, qs);
      const size_t i = static_cast<size_t>(k) * channels + c0;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(meta.q_mu.data() + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(meta.q_sigma.data() + i), _mm512_cvtepi32_epi8(qs));
    }
  }
  if (full < channels) RefStatsRange(page, centering, meta, full, channels);
}

KVT_AVX512 void Codes(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes) {
  const int channels = page.channels;
  const int full = channels / kLanes * kLanes;
  const __m512 one = _mm512_set1_ps(1.0f), minus_one = _mm512_set1_ps(-1.0f);
  const __m512 zero = _mm512_setzero_ps();
  const __m512 buckets = _mm512_set1_ps(static_cast<float>(tables.bucket_count));
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i sign_code = _mm512_set1_epi32(1 << (tables.bits - 1));
  const int32_t* bucket_base = tables.bucket_base.data();
  const float* thresholds = tables.padded_thresholds.data();
  const int corrections = tables.corrections;
  for (int t = 0; t < page.tokens; ++t) {
    const int k = t / meta.chunk_len;
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    const float* mu_row = meta.mu.data() + static_cast<size_t>(k) * channels;
    const float* inv_row = meta.inv_sigma.data() + static_cast<size_t>(k) * channels;
    uint8_t* out = codes + static_cast<size_t>(t) * channels;
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const __m512 x = _mm512_loadu_ps(row + c0);
      const __m512 mu = _mm512_loadu_ps(mu_row + c0);
      const __m512 inv = _mm512_loadu_ps(inv_row + c0);
      __m512 xf = _mm512_mul_ps(_mm512_sub_ps(x, mu), inv);
      xf = _mm512_min_ps(_mm512_max_ps(xf, minus_one), one);
      xf = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(inv, zero, _CMP_NEQ_OQ), xf);
      const __mmask16 neg = _mm512_cmp_ps_mask(xf, zero, _CMP_LT_OQ);
      const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(xf), abs_mask));
      const __m512i j = _mm512_cvttps_epi32(_mm512_mul_ps(a, buckets));
      const __m512i base = _mm512_i32gather_epi32(j, bucket_base, 4);
      __m512i code = base;
      for (int i = 1; i <= corrections; ++i) {
        const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32(i));
        const __m512 th = _mm512_i32gather_ps(idx, thresholds, 4);
        const __mmask16 ge = _mm512_cmp_ps_mask(a, th, _CMP_GE_OQ);
        code = _mm512_mask_add_epi32(code, ge, code, _mm512_set1_epi32(1));
      }
      code = _mm512_mask_or_epi32(code, neg, code, sign_code);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c0), _mm512_cvtepi32_epi8(code));
    }
  }
  if (full < channels) RefCodesRange(page, meta, tables, codes, full, channels);
}

KVT_AVX512 void Reconstruct(const uint8_t* prefix, const LynxPageMeta& meta, const float* table,
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
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c0)));
      const __m512 v = _mm512_i32gather_ps(idx, table, 4);
      const __m512 y = _mm512_add_ps(_mm512_loadu_ps(mu_row + c0), _mm512_mul_ps(_mm512_loadu_ps(sigma_row + c0), v));
      _mm512_storeu_ps(row + c0, Clamp(y, _mm512_loadu_ps(meta.lo.data() + c0), _mm512_loadu_ps(meta.hi.data() + c0)));
    }
  }
  if (full < channels) RefReconstructRange(prefix, meta, table, out, full, channels);
}

KVT_AVX512 bool AllFinite(const PageView& page) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  const int full = page.channels / kLanes * kLanes;
  const __mmask16 tail = static_cast<__mmask16>((1u << (page.channels - full)) - 1);
  __mmask16 bad = 0;
  for (int t = 0; t < page.tokens; ++t) {
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const __m512i e = _mm512_and_si512(_mm512_loadu_si512(row + c0), exp_mask);
      bad |= _mm512_cmpeq_epi32_mask(e, exp_mask);
    }
    if (tail) {
      const __m512i e = _mm512_and_si512(_mm512_maskz_loadu_epi32(tail, row + full), exp_mask);
      bad |= _mm512_mask_cmpeq_epi32_mask(tail, e, exp_mask);
    }
    if (bad) return false;
  }
  return true;
}

}  // namespace

const LynxKernels& Avx512LynxKernels() {
  static const LynxKernels k{Stats, Codes, Reconstruct, AllFinite};
  return k;
}

}  // namespace kvt::codec::internal
