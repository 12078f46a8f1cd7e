// AVX-512 (F, BW, DQ, VL) lynx inner loops: 16 channels per vector, tokens in order, the reference's float ops
// lane by lane. Channels past the last full vector run the reference loops. Compiled for the target with
// function attributes and only called after ImplAvailable(kAvx512), so the binary still runs on x86-64-v2.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own undefined-vector helpers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "codec/internal/lynx_avx512_common.h"
#include "codec/internal/lynx_candidate_lanes.h"
#include "codec/internal/lynx_extremes.h"
#include "codec/internal/lynx_frame_spikes.h"
#include "codec/internal/lynx_kernels.h"
#include "codec/internal/lynx_kernels_avx512_vbmi.h"

namespace kvt::codec::internal {
namespace {

using avx512::Clamp;
using avx512::GuessCode;
using avx512::kLanes;



// The chunk-end grid 0..G in every lane: G, its centre C = G / 2 as a float and float(1 / C).
struct Grid {
  __m512i top;
  __m512 centre, inv_centre;
};
KVT_AVX512 inline Grid MakeGrid(int grid_max) {
  const float c = static_cast<float>(grid_max >> 1);
  return Grid{_mm512_set1_epi32(grid_max), _mm512_set1_ps(c), _mm512_set1_ps(1.0f / c)};
}

// ChunkEnd (lynx_grid.h) for 16 grid indices, lane by lane; the grid offset without a division, by
// EndOffsetByReciprocal's operations (equal to EndOffset at every grid point).
KVT_AVX512 inline __m512 Ends(__m512i q, __m512 lo, __m512 hi, __m512 fc, __m512 fh, const Grid& g) {
  const __m512 n = _mm512_sub_ps(_mm512_cvtepi32_ps(q), g.centre);
  const __m512 y = _mm512_mul_ps(n, g.inv_centre);
  const __m512 off = _mm512_fmadd_ps(_mm512_fnmadd_ps(y, g.centre, n), g.inv_centre, y);
  __m512 e = Clamp(_mm512_add_ps(fc, _mm512_mul_ps(fh, off)), lo, hi);
  e = _mm512_mask_mov_ps(e, _mm512_cmple_epi32_mask(q, _mm512_setzero_si512()), lo);
  return _mm512_mask_mov_ps(e, _mm512_cmpge_epi32_mask(q, g.top), hi);
}

// GuessEnd's starting point (any guess gives the same answer): about the truncated position of t on the grid,
// from the channel's 1 / half (`inv_h`) instead of a division.
KVT_AVX512 inline __m512i GuessEnds(__m512 t, __m512 fc, __m512 inv_h, const Grid& grid) {
  const __m512 u = Clamp(_mm512_mul_ps(_mm512_sub_ps(t, fc), inv_h), _mm512_set1_ps(-1.0f), _mm512_set1_ps(1.0f));
  const __m512i g = _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(u, grid.centre), grid.centre));
  return _mm512_min_epi32(_mm512_max_epi32(g, _mm512_setzero_si512()), grid.top);
}

// QuantizeChunkEnds for 16 chunk-channels: the same searches, lane by lane, on the lanes with half > 0 (`live`).
// Also gives the ends there, end(q_low) and end(q_high) (lo where not live: end(0)).
KVT_AVX512 inline void QuantizeEnds(__m512 ta, __m512 tb, __m512 lo, __m512 hi, __m512 fc, __m512 fh,
                                    __m512 inv_h, __mmask16 live, const Grid& grid, __m512i& q_low,
                                    __m512i& q_high, __m512& end_low, __m512& end_high) {
  const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
  const __m512i top = grid.top;
  // Fast path: the guesses are almost always right (q_low = guess, q_high = guess + 1), so check both answers'
  // defining conditions with four independent Ends at once instead of walking the latency-bound searches. A
  // vector whose every live lane passes gets exactly the searches' answers (they do not depend on the start).
  const __m512i g_low = GuessEnds(ta, fc, inv_h, grid);
  const __m512i c_high = _mm512_min_epi32(_mm512_add_epi32(GuessEnds(tb, fc, inv_h, grid), one), top);
  {
    // q_low = g_low iff end(g_low) <= ta and (g_low == top or end(g_low + 1) > ta).
    const __m512 e_low = Ends(g_low, lo, hi, fc, fh, grid), e_high = Ends(c_high, lo, hi, fc, fh, grid);
    const __mmask16 low_ok =
        _mm512_cmp_ps_mask(e_low, ta, _CMP_LE_OQ) &
        (_mm512_cmpeq_epi32_mask(g_low, top) |
         _mm512_cmp_ps_mask(Ends(_mm512_add_epi32(g_low, one), lo, hi, fc, fh, grid), ta, _CMP_GT_OQ));
    // q_high = c_high iff c_high >= q_low, end(c_high) >= tb and (c_high == q_low or end(c_high - 1) < tb).
    const __mmask16 high_ok =
        _mm512_cmpge_epi32_mask(c_high, g_low) & _mm512_cmp_ps_mask(e_high, tb, _CMP_GE_OQ) &
        (_mm512_cmpeq_epi32_mask(c_high, g_low) |
         _mm512_cmp_ps_mask(Ends(_mm512_sub_epi32(c_high, one), lo, hi, fc, fh, grid), tb, _CMP_LT_OQ));
    if ((live & low_ok & high_ok) == live) {
      q_low = _mm512_maskz_mov_epi32(live, g_low);
      q_high = _mm512_maskz_mov_epi32(live, c_high);
      end_low = _mm512_mask_mov_ps(lo, live, e_low);
      end_high = _mm512_mask_mov_ps(lo, live, e_high);
      return;
    }
  }
  // q_low: the largest q with end(q) <= ta.
  __m512i q = g_low;
  for (__mmask16 m = live; m;) {
    m = live & _mm512_cmpgt_epi32_mask(q, zero) & _mm512_cmp_ps_mask(Ends(q, lo, hi, fc, fh, grid), ta, _CMP_GT_OQ);
    q = _mm512_mask_sub_epi32(q, m, q, one);
  }
  for (__mmask16 m = live; m;) {
    m = live & _mm512_cmplt_epi32_mask(q, top) &
        _mm512_cmp_ps_mask(Ends(_mm512_add_epi32(q, one), lo, hi, fc, fh, grid), ta, _CMP_LE_OQ);
    q = _mm512_mask_add_epi32(q, m, q, one);
  }
  q_low = _mm512_maskz_mov_epi32(live, q);
  // q_high: the smallest q >= q_low with end(q) >= tb.
  q = _mm512_max_epi32(GuessEnds(tb, fc, inv_h, grid), q_low);
  for (__mmask16 m = live; m;) {
    m = live & _mm512_cmpgt_epi32_mask(q, q_low) &
        _mm512_cmp_ps_mask(Ends(_mm512_sub_epi32(q, one), lo, hi, fc, fh, grid), tb, _CMP_GE_OQ);
    q = _mm512_mask_sub_epi32(q, m, q, one);
  }
  for (__mmask16 m = live; m;) {
    m = live & _mm512_cmplt_epi32_mask(q, top) & _mm512_cmp_ps_mask(Ends(q, lo, hi, fc, fh, grid), tb, _CMP_LT_OQ);
    q = _mm512_mask_add_epi32(q, m, q, one);
  }
  q_high = _mm512_maskz_mov_epi32(live, q);
  end_low = Ends(q_low, lo, hi, fc, fh, grid);
  end_high = Ends(q_high, lo, hi, fc, fh, grid);
}

// ChunkCentreAndWidth of 16 chunk-channels from their ends a <= b: mu and sigma.
KVT_AVX512 inline void MuSigma(__m512 a, __m512 b, __m512& mu, __m512& sigma) {
  const __m512 half_f = _mm512_set1_ps(0.5f);
  mu = Clamp(_mm512_add_ps(_mm512_mul_ps(half_f, a), _mm512_mul_ps(half_f, b)), a, b);
  sigma = _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(b, mu), _mm512_sub_ps(mu, a)),
                        _mm512_set1_ps(std::numeric_limits<float>::max()));
}

// MuSigma and InverseSigma (LynxPageMeta::Derive) of 16 chunk-channels, stored.
KVT_AVX512 inline void ChunkParameters(__m512 a, __m512 b, float* mu, float* sigma, float* inv_sigma) {
  __m512 m, s;
  MuSigma(a, b, m, s);
  const __m512 inv = _mm512_maskz_mov_ps(
      _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_GT_OQ),
      _mm512_min_ps(_mm512_div_ps(_mm512_set1_ps(1.0f), s), _mm512_set1_ps(std::numeric_limits<float>::max())));
  _mm512_storeu_ps(mu, m);
  _mm512_storeu_ps(sigma, s);
  _mm512_storeu_ps(inv_sigma, inv);
}

// The statistics pass over one chunk of kVectors * 16 channels from `row0` (n rows, `stride` floats apart) into
// entries [i, i + 16 kVectors) of e: min, max and, kMean, the sum; kSeconds, for the frame spikes, also min2,
// max2 and the extremes' tokens (ChunkExtremes), and, given `lanes`, offers the least and greatest values to the
// candidate lists of groups g0 .. g0 + kVectors - 1 as chunk `chunk` (chunks in order, while in registers). Kept
// in registers; `bad` collects the lanes that met a NaN or an infinity.
template <int kVectors, bool kMean, bool kSeconds>
KVT_AVX512 inline void ChunkColumns(const float* row0, size_t stride, int n, __m512 inv_n, ChunkExtremes& e, size_t i,
                                    const char* prefetch, CandidateLanes* lanes, int chunk, int g0, __mmask16& bad) {
  constexpr int kNonFinite = 0x01 | 0x08 | 0x10 | 0x80;  // QNaN, +Inf, -Inf, SNaN
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 vmin[kVectors], vmax[kVectors], vsum[kVectors], vmin2[kVectors], vmax2[kVectors];
  __m512i tmin[kVectors], tmax[kVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    vmin[v] = vmin2[v] = inf;
    vmax[v] = vmax2[v] = ninf;
    vsum[v] = _mm512_setzero_ps();
    tmin[v] = tmax[v] = _mm512_setzero_si512();
  }
  __mmask16 seen = 0;
  for (int t = 0; t < n; ++t) {
    const float* row = row0 + static_cast<size_t>(t) * stride;
    const __m512i tv = _mm512_set1_epi32(t);
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      _mm_prefetch(prefetch + (t * kVectors + v) * 64, _MM_HINT_T0);
      const __m512 x = _mm512_loadu_ps(row + kLanes * v);
      if constexpr (kSeconds) {
        vmin2[v] = _mm512_min_ps(vmin2[v], _mm512_max_ps(vmin[v], x));
        vmax2[v] = _mm512_max_ps(vmax2[v], _mm512_min_ps(vmax[v], x));
        tmin[v] = _mm512_mask_mov_epi32(tmin[v], _mm512_cmp_ps_mask(x, vmin[v], _CMP_LT_OQ), tv);  // the first
        tmax[v] = _mm512_mask_mov_epi32(tmax[v], _mm512_cmp_ps_mask(x, vmax[v], _CMP_GE_OQ), tv);  // the last
      }
      vmin[v] = _mm512_min_ps(vmin[v], x);
      vmax[v] = _mm512_max_ps(vmax[v], x);
      if constexpr (kMean) vsum[v] = _mm512_add_ps(vsum[v], _mm512_mul_ps(x, inv_n));
      seen |= _mm512_fpclass_ps_mask(x, kNonFinite);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    const size_t at = i + kLanes * v;
    _mm512_storeu_ps(&e.min[at], vmin[v]);
    _mm512_storeu_ps(&e.max[at], vmax[v]);
    if constexpr (kMean) _mm512_storeu_ps(&e.sum[at], vsum[v]);
    if constexpr (kSeconds) {
      _mm512_storeu_ps(&e.min2[at], vmin2[v]);
      _mm512_storeu_ps(&e.max2[at], vmax2[v]);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(&e.argmin[at]), _mm512_cvtepi32_epi8(tmin[v]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(&e.argmax[at]), _mm512_cvtepi32_epi8(tmax[v]));
      if (lanes != nullptr) lanes->Offer(g0 + v, vmin[v], vmax[v], chunk);
    }
  }
  bad |= seen;
}

// The statistics pass over every chunk of channels [0, full): blocks of kVectors vectors (a 1024-channel row is
// visited 1024 / (16 kVectors) times per chunk), then single vectors.
template <int kVectors, bool kMean, bool kSeconds>
KVT_AVX512 __mmask16 ChunkPass(const PageView& page, const LynxPageMeta& meta, int full, ChunkExtremes& e,
                               CandidateLanes* lanes) {
  const int n = meta.chunk_len;
  const __m512 inv_n = _mm512_set1_ps(1.0f / static_cast<float>(n));
  __mmask16 bad = 0;
  for (int k = 0; k < meta.num_chunks; ++k) {
    const float* chunk = page.data + static_cast<size_t>(k) * n * page.stride();
    const size_t i = static_cast<size_t>(k) * page.channels;
    // The next chunk's rows, a cache line per vector read: they are one block of memory on a dense page, which
    // the reads below visit column block by column block.
    const char* next = reinterpret_cast<const char*>(chunk + static_cast<size_t>(n) * page.stride());
    int c0 = 0;
    for (; c0 + kVectors * kLanes <= full; c0 += kVectors * kLanes, next += n * kVectors * 64) {
      ChunkColumns<kVectors, kMean, kSeconds>(chunk + c0, page.stride(), n, inv_n, e, i + c0, next, lanes, k,
                                              c0 / kLanes, bad);
    }
    for (; c0 < full; c0 += kLanes, next += n * 64) {
      ChunkColumns<1, kMean, kSeconds>(chunk + c0, page.stride(), n, inv_n, e, i + c0, next, lanes, k, c0 / kLanes,
                                       bad);
    }
  }
  return bad;
}

// Per-thread ChunkExtremes and CandidateLanes, so a hot encode loop does not allocate and fault in its arrays per
// page. The extremes are released when large (the lanes are 2 KB per 16 channels and kept).
class ChunkScratch {
 public:
  ChunkScratch() : e_(Extremes()), lanes_(Lanes()) {}
  ~ChunkScratch() {
    if (e_.min.capacity() > (size_t{1} << 20)) e_ = ChunkExtremes();
  }
  ChunkExtremes& get() { return e_; }
  CandidateLanes& lanes() { return lanes_; }

 private:
  static ChunkExtremes& Extremes() {
    thread_local ChunkExtremes e;
    return e;
  }
  static CandidateLanes& Lanes() {
    thread_local CandidateLanes lanes;
    return lanes;
  }
  ChunkExtremes& e_;
  CandidateLanes& lanes_;
};

void StatsTail(Centering centering, ChunkExtremes& e, int full, LynxPageMeta& meta);

// Stats, and with `spikes` (meta.frame_spikes > 0) the frame spikes first (SelectChannelFrameSpikes from the same
// pass's chunk extremes): lo .. q_high then describe the page with its spikes masked. Returns false, before
// quantizing any ends, when the page holds a NaN or an infinity.
KVT_AVX512 bool StatsImpl(const PageView& page, Centering centering, bool spikes, LynxPageMeta& meta) {
  const int channels = page.channels;
  const int full = channels / kLanes * kLanes;
  const bool mean = centering == Centering::kMean;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const size_t chunk_values = static_cast<size_t>(meta.num_chunks) * channels;
  ChunkScratch scratch;
  ChunkExtremes& e = scratch.get();
  // Every entry read below is written first (by the pass, or for channels past `full` by ScanChunkExtremes or
  // RefStatsRange): no zero-filling.
  e.Resize(chunk_values, mean);
  // 8 vectors a block (4 with the seconds, which need more registers).
  __mmask16 bad;
  CandidateLanes& lanes = scratch.lanes();
  if (spikes) {
    lanes.Reset(full / kLanes, std::min(meta.frame_spikes + 1, meta.num_chunks));
    bad = mean ? ChunkPass<2, true, true>(page, meta, full, e, &lanes)
               : ChunkPass<4, false, true>(page, meta, full, e, &lanes);
  } else {
    bad = mean ? ChunkPass<8, true, false>(page, meta, full, e, nullptr)
               : ChunkPass<8, false, false>(page, meta, full, e, nullptr);
  }
  if (bad) return false;
  if (spikes) {
    if (full < channels && !ScanChunkExtremes(page, meta, centering, full, channels, e)) return false;
    alignas(64) CandidateList bottom[kLanes], top[kLanes];
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      lanes.Read(c0 / kLanes, bottom, top);
      for (int l = 0; l < kLanes; ++l) SelectChannelFrameSpikes(page, centering, bottom[l], top[l], c0 + l, e, meta);
    }
    for (int c = full; c < channels; ++c) {
      ChannelCandidateChunks(e, meta, c, bottom[0], top[0]);
      SelectChannelFrameSpikes(page, centering, bottom[0], top[0], c, e, meta);
    }
  } else {
    for (int t = 0; t < page.tokens && full < channels; ++t) {  // the channels the reference loops take
      const float* row = page.data + static_cast<size_t>(t) * page.stride();
      for (int c = full; c < channels; ++c) {
        if (!std::isfinite(row[c])) return false;
      }
    }
  }
  for (int c0 = 0; c0 < full && !spikes; c0 += kLanes) {  // (SelectChannelFrameSpikes sets them)
    __m512 lo = inf, hi = ninf;
    for (int k = 0; k < meta.num_chunks; ++k) {
      lo = _mm512_min_ps(lo, _mm512_loadu_ps(&e.min[static_cast<size_t>(k) * channels + c0]));
      hi = _mm512_max_ps(hi, _mm512_loadu_ps(&e.max[static_cast<size_t>(k) * channels + c0]));
    }
    // Canonical zeros (+0).
    lo = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(lo, zero, _CMP_NEQ_OQ), lo);
    hi = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(hi, zero, _CMP_NEQ_OQ), hi);
    _mm512_storeu_ps(meta.lo.data() + c0, lo);
    _mm512_storeu_ps(meta.hi.data() + c0, hi);
  }
  std::vector<float> centre(channels), half(channels), inv_half(channels);
  for (int c = 0; c < full; ++c) {
    const ChannelFrame f = MakeChannelFrame(meta.lo[c], meta.hi[c], meta.grid_max);
    meta.frames[c] = f;
    centre[c] = f.centre;
    half[c] = f.half;
    inv_half[c] = f.half > 0.0f ? 1.0f / f.half : 0.0f;  // only the searches' starting points depend on it
  }
  const Grid grid = MakeGrid(meta.grid_max);
  for (int k = 0; k < meta.num_chunks; ++k) {
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const size_t i = static_cast<size_t>(k) * channels + c0;
      const __m512 lo = _mm512_loadu_ps(&meta.lo[c0]), hi = _mm512_loadu_ps(&meta.hi[c0]);
      const __m512 fc = _mm512_loadu_ps(&centre[c0]), fh = _mm512_loadu_ps(&half[c0]);
      const __m512 cmin = _mm512_loadu_ps(&e.min[i]), cmax = _mm512_loadu_ps(&e.max[i]);
      __m512 ta = cmin, tb = cmax;
      if (mean) {  // QuantizeChunkEnds' mean-centred interval, clipped to [lo, hi]
        const __m512 m = Clamp(_mm512_loadu_ps(&e.sum[i]), cmin, cmax);
        const __m512 d = _mm512_max_ps(_mm512_sub_ps(cmax, m), _mm512_sub_ps(m, cmin));
        ta = _mm512_max_ps(_mm512_min_ps(_mm512_sub_ps(m, d), cmin), lo);
        tb = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(m, d), cmax), hi);
      }
      __m512i ql, qh;
      __m512 a, b;
      QuantizeEnds(ta, tb, lo, hi, fc, fh, _mm512_loadu_ps(&inv_half[c0]), _mm512_cmp_ps_mask(fh, zero, _CMP_NEQ_OQ),
                   grid, ql, qh, a, b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&meta.q_low[i]), _mm512_cvtepi32_epi16(ql));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&meta.q_high[i]), _mm512_cvtepi32_epi16(qh));
      ChunkParameters(a, b, &meta.mu[i], &meta.sigma[i], &meta.inv_sigma[i]);
    }
  }
  if (full < channels) {
    if (spikes) {
      StatsTail(centering, e, full, meta);
    } else {
      RefStatsRange(page, centering, meta, full, channels);
    }
  }
  // What Derive would give, the vector channels' frames and chunks above: the other channels' frames and chunks
  // (their ranges set by the tail pass).
  for (int c = full; c < channels; ++c) meta.frames[c] = MakeChannelFrame(meta.lo[c], meta.hi[c], meta.grid_max);
  for (int k = 0; k < meta.num_chunks && full < channels; ++k) {
    for (int c = full; c < channels; ++c) {
      const size_t i = static_cast<size_t>(k) * channels + c;
      ChunkCentreAndWidth(meta.frames[c], meta.q_low[i], meta.q_high[i], meta.mu[i], meta.sigma[i]);
      meta.inv_sigma[i] = InverseSigma(meta.sigma[i]);
    }
  }
  return true;
}

// StatsImpl's channels past the last vector with frame spikes, from their (masked) chunk extremes and channel
// range.
void StatsTail(Centering centering, ChunkExtremes& e, int full, LynxPageMeta& meta) {
  const bool mean = centering == Centering::kMean;
  const int channels = meta.channels;
  for (int c = full; c < channels && mean; ++c) {
    for (int k = 0; k < meta.num_chunks; ++k) {
      const size_t i = static_cast<size_t>(k) * channels + c;
      e.sum[i] = internal::Clamp(e.sum[i], e.min[i], e.max[i]);  // the target centre, in place
    }
  }
  // (Midrange centering reads no centre.)
  QuantizeChunkRange(meta, centering, e.min.data(), e.max.data(), mean ? e.sum.data() : e.min.data(), full, channels);
}

KVT_AVX512 bool Stats(const PageView& page, Centering centering, LynxPageMeta& meta) {
  return StatsImpl(page, centering, false, meta);
}

KVT_AVX512 bool StatsFrameSpikes(const PageView& page, Centering centering, LynxPageMeta& meta) {
  return StatsImpl(page, centering, true, meta);
}

// Up to 128 floats held in kRegs registers, looked up by index (< 16 * kRegs) with permutes, not gathers.
template <int kRegs>
KVT_AVX512 inline __m512 Lookup(const __m512 (&reg)[8], __m512i idx) {
  if constexpr (kRegs == 1) {
    return _mm512_permutexvar_ps(idx, reg[0]);
  } else {
    __m512 v = _mm512_permutex2var_ps(reg[0], idx, reg[1]);  // index bits 0..4
    if constexpr (kRegs >= 4) {
      const __m512i pair = _mm512_srli_epi32(idx, 5);
      v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(pair, _mm512_set1_epi32(1)),
                             _mm512_permutex2var_ps(reg[2], idx, reg[3]));
      if constexpr (kRegs == 8) {
        v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(pair, _mm512_set1_epi32(2)),
                               _mm512_permutex2var_ps(reg[4], idx, reg[5]));
        v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(pair, _mm512_set1_epi32(3)),
                               _mm512_permutex2var_ps(reg[6], idx, reg[7]));
      }
    }
    return v;
  }
}

KVT_AVX512 inline void LoadTable(const std::vector<float>& table, __m512 (&reg)[8]) {
  alignas(64) float padded[128] = {};
  for (size_t i = 0; i < table.size() && i < 128; ++i) padded[i] = table[i];
  for (int r = 0; r < 8; ++r) reg[r] = _mm512_load_ps(padded + 16 * r);
}


// x_final and its sign for 16 values (FinalValue, lane by lane).
KVT_AVX512 inline __m512 FinalValues(const float* x, const float* mu, const float* inv, __mmask16& neg) {
  // Clamping to [-1, 1] then taking sign and magnitude equals taking them first and clamping |xf| to 1.
  const __m512 zero = _mm512_setzero_ps();
  const __m512 vinv = _mm512_loadu_ps(inv);
  __m512 xf = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x), _mm512_loadu_ps(mu)), vinv);
  xf = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(vinv, zero, _CMP_NEQ_OQ), xf);  // sigma == 0: x_final = 0
  neg = _mm512_cmp_ps_mask(xf, zero, _CMP_LT_OQ);
  const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(xf), _mm512_set1_epi32(0x7FFFFFFF)));
  return _mm512_min_ps(a, _mm512_set1_ps(1.0f));
}

template <int kRegs>
KVT_AVX512 void CodesGuess(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes) {
  const int channels = page.channels;
  const int full = channels / kLanes * kLanes;
  __m512 high[8];
  LoadTable(tables.guess_high, high);
  const __m512 alpha = _mm512_set1_ps(tables.guess_alpha), scale = _mm512_set1_ps(tables.guess_scale);
  const __m512 knee_slope = _mm512_set1_ps(tables.knee_slope), knee_offset = _mm512_set1_ps(tables.knee_offset);
  const bool knee = tables.top_width > 0.0f;
  const __m512i max_code = _mm512_set1_epi32(tables.max_code);
  const __m512i ones = _mm512_set1_epi32(1);
  const __m512i sign_code = _mm512_set1_epi32(1 << (tables.bits - 1));
  for (int t = 0; t < page.tokens; ++t) {
    const size_t k = static_cast<size_t>(t / meta.chunk_len) * channels;
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    uint8_t* out = codes + static_cast<size_t>(t) * channels;
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      __mmask16 neg;
      const __m512 a = FinalValues(row + c0, meta.mu.data() + k + c0, meta.inv_sigma.data() + k + c0, neg);
      const __m512i f = GuessCode(a, alpha, scale, knee, knee_slope, knee_offset, max_code);
      __m512i code = _mm512_mask_add_epi32(f, _mm512_cmp_ps_mask(a, Lookup<kRegs>(high, f), _CMP_GE_OQ), f, ones);
      code = _mm512_mask_or_epi32(code, neg, code, sign_code);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c0), _mm512_cvtepi32_epi8(code));
    }
  }
  if (full < channels) RefCodesRange(page, meta, tables, codes, full, channels);
}

// The bucket path (gathers), for tables whose log guess was not verified.
KVT_AVX512 void CodesBuckets(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables,
                             uint8_t* codes) {
  const int channels = page.channels;
  const int full = channels / kLanes * kLanes;
  const __m512 buckets = _mm512_set1_ps(static_cast<float>(tables.bucket_count));
  const __m512i ones = _mm512_set1_epi32(1);
  const __m512i sign_code = _mm512_set1_epi32(1 << (tables.bits - 1));
  for (int t = 0; t < page.tokens; ++t) {
    const size_t k = static_cast<size_t>(t / meta.chunk_len) * channels;
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    uint8_t* out = codes + static_cast<size_t>(t) * channels;
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      __mmask16 neg;
      const __m512 a = FinalValues(row + c0, meta.mu.data() + k + c0, meta.inv_sigma.data() + k + c0, neg);
      const __m512i j = _mm512_cvttps_epi32(_mm512_mul_ps(a, buckets));
      const __m512i base = _mm512_i32gather_epi32(j, tables.bucket_base.data(), 4);
      __m512i code = base;
      for (int i = 1; i <= tables.corrections; ++i) {
        const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32(i));
        const __m512 th = _mm512_i32gather_ps(idx, tables.padded_thresholds.data(), 4);
        code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, th, _CMP_GE_OQ), code, ones);
      }
      code = _mm512_mask_or_epi32(code, neg, code, sign_code);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c0), _mm512_cvtepi32_epi8(code));
    }
  }
  if (full < channels) RefCodesRange(page, meta, tables, codes, full, channels);
}

KVT_AVX512 void Codes(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes) {
  if (!tables.log_guess_ok) return CodesBuckets(page, meta, tables, codes);
  const int size = tables.max_code + 1;
  if (size <= 16) return CodesGuess<1>(page, meta, tables, codes);
  if (size <= 32) return CodesGuess<2>(page, meta, tables, codes);
  if (size <= 64) return CodesGuess<4>(page, meta, tables, codes);
  return CodesGuess<8>(page, meta, tables, codes);
}


// A table of up to 256 signed values whose upper half is the negation of its lower half (decode_table), looked
// up without gathers: the magnitude half (up to 128 floats) sits in registers and permutes pick from it.
struct SignedTableLookup {
  int known = 0;       // index bits
  int mag_regs = 0;    // 16-float registers holding the magnitude half (1, 2, 4 or 8)
  __m512 mag[8];

  KVT_AVX512 explicit SignedTableLookup(const float* table, int known_bits) : known(known_bits) {
    const int half = 1 << (known - 1);
    alignas(64) float padded[128] = {};
    for (int i = 0; i < half; ++i) padded[i] = table[i];
    mag_regs = half <= 16 ? 1 : half / 16;
    for (int r = 0; r < mag_regs; ++r) mag[r] = _mm512_load_ps(padded + 16 * r);
  }

  KVT_AVX512 __m512 operator()(__m512i idx) const {
    const __m512i m = _mm512_and_si512(idx, _mm512_set1_epi32((1 << (known - 1)) - 1));  // magnitude index
    __m512 v;
    if (mag_regs == 1) {
      v = _mm512_permutexvar_ps(m, mag[0]);  // uses bits 0..3
    } else {
      v = _mm512_permutex2var_ps(mag[0], m, mag[1]);  // bits 0..4
      for (int pair = 1; pair < mag_regs / 2; ++pair) {
        const __m512 w = _mm512_permutex2var_ps(mag[2 * pair], m, mag[2 * pair + 1]);
        const __mmask16 sel = _mm512_cmpeq_epi32_mask(_mm512_srli_epi32(m, 5), _mm512_set1_epi32(pair));
        v = _mm512_mask_mov_ps(v, sel, w);
      }
    }
    // Sign: index bit known - 1 -> float bit 31.
    const __m512i sign = _mm512_and_si512(_mm512_slli_epi32(idx, 32 - known), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), sign));
  }
};

KVT_AVX512 void Reconstruct(const uint8_t* prefix, const LynxPageMeta& meta, const float* table, int known,
                            const MutablePageView& out) {
  const int channels = meta.channels;
  const int full = channels / kLanes * kLanes;
  const SignedTableLookup lookup(table, known);
  for (int t = 0; t < meta.tokens; ++t) {
    const int k = t / meta.chunk_len;
    const float* mu_row = meta.mu.data() + static_cast<size_t>(k) * channels;
    const float* sigma_row = meta.sigma.data() + static_cast<size_t>(k) * channels;
    const uint8_t* in = prefix + static_cast<size_t>(t) * channels;
    float* row = out.data + static_cast<size_t>(t) * out.stride();
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c0)));
      const __m512 v = lookup(idx);
      const __m512 y = _mm512_add_ps(_mm512_loadu_ps(mu_row + c0), _mm512_mul_ps(_mm512_loadu_ps(sigma_row + c0), v));
      _mm512_storeu_ps(row + c0, Clamp(y, _mm512_loadu_ps(meta.lo.data() + c0), _mm512_loadu_ps(meta.hi.data() + c0)));
    }
  }
  if (full < channels) RefReconstructRange(prefix, meta, table, out, full, channels);
}

// meta.frames from lo and hi (MakeChannelFrame 8 channels at a time: the same double operations, rounded once
// to float), their centres and halves also into `centre` and `half` ([channels] each).
KVT_AVX512 void MakeFrames(LynxPageMeta& meta, std::vector<float>& centre, std::vector<float>& half) {
  const int channels = meta.channels;
  centre.resize(channels);
  half.resize(channels);
  int f = 0;
  for (; f + 8 <= channels; f += 8) {
    const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(&meta.lo[f])), hi = _mm512_cvtps_pd(_mm256_loadu_ps(&meta.hi[f]));
    const __m512d half_d = _mm512_set1_pd(0.5);
    _mm256_storeu_ps(&centre[f], _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_add_pd(lo, hi), half_d)));
    _mm256_storeu_ps(&half[f], _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_sub_pd(hi, lo), half_d)));
  }
  for (; f < channels; ++f) {
    const ChannelFrame frame = MakeChannelFrame(meta.lo[f], meta.hi[f], meta.grid_max);
    centre[f] = frame.centre;
    half[f] = frame.half;
  }
  for (f = 0; f < channels; ++f) {
    meta.frames[f] = ChannelFrame{meta.lo[f], meta.hi[f], centre[f], half[f], meta.grid_max};
  }
}

// LynxPageMeta::Derive, 16 chunk-channels at a time.
KVT_AVX512 void Derive(LynxPageMeta& meta) {
  const int channels = meta.channels;
  const int full = channels / kLanes * kLanes;
  std::vector<float> centre, half;
  MakeFrames(meta, centre, half);
  const Grid grid = MakeGrid(meta.grid_max);
  for (int k = 0; k < meta.num_chunks; ++k) {
    const size_t base = static_cast<size_t>(k) * channels;
    for (int c0 = 0; c0 < full; c0 += kLanes) {
      const __m512i ql =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(&meta.q_low[base + c0])));
      const __m512i qh =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(&meta.q_high[base + c0])));
      const __m512 lo = _mm512_loadu_ps(&meta.lo[c0]), hi = _mm512_loadu_ps(&meta.hi[c0]);
      const __m512 fc = _mm512_loadu_ps(&centre[c0]), fh = _mm512_loadu_ps(&half[c0]);
      ChunkParameters(Ends(ql, lo, hi, fc, fh, grid), Ends(qh, lo, hi, fc, fh, grid), &meta.mu[base + c0],
                      &meta.sigma[base + c0], &meta.inv_sigma[base + c0]);
    }
    for (int c = full; c < channels; ++c) {
      ChunkCentreAndWidth(meta.frames[c], meta.q_low[base + c], meta.q_high[base + c], meta.mu[base + c],
                          meta.sigma[base + c]);
      meta.inv_sigma[base + c] = InverseSigma(meta.sigma[base + c]);
    }
  }
}

// t(h) = h (h + 1) / 2, the first end-pair index of high end h.
KVT_AVX512 inline __m512i Tri(__m512i h) {
  return _mm512_srli_epi32(_mm512_mullo_epi32(h, _mm512_add_epi32(h, _mm512_set1_epi32(1))), 1);
}

// EndPairFromIndex for 16 indices x (each at most MaxEndPairIndex(grid_max)): an f32 square-root guess of the
// high end, one integer correction each way where the guess is off, and the pairs (ql, qh). Returns the lanes
// that still fail the check t(qh) <= x < t(qh + 1), for RefEndPairs. On the default grids the guess is always
// the pair (for G < 2^10, 8 x + 1 is exact in f32 and the square root's rounding is far smaller than the gap from
// t(h + 1) - 1's root to the next integer), so the corrections run only when it is not.
KVT_AVX512 inline __mmask16 EndPairGuess(__m512i x, int grid_max, __m512i& ql, __m512i& qh) {
  const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
  const __m512 s = _mm512_sqrt_ps(
      _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_set1_ps(8.0f)), _mm512_set1_ps(1.0f)));
  __m512i h = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_sub_ps(s, _mm512_set1_ps(1.0f)), _mm512_set1_ps(0.5f)));
  h = _mm512_min_epi32(_mm512_max_epi32(h, zero), _mm512_set1_epi32(grid_max));
  ql = _mm512_sub_epi32(x, Tri(h));
  qh = h;
  if (_mm512_cmplt_epi32_mask(ql, zero) | _mm512_cmpgt_epi32_mask(ql, h)) {
    h = _mm512_mask_sub_epi32(h, _mm512_cmpgt_epi32_mask(Tri(h), x), h, one);
    h = _mm512_mask_add_epi32(h, _mm512_cmple_epi32_mask(Tri(_mm512_add_epi32(h, one)), x), h, one);
    ql = _mm512_sub_epi32(x, Tri(h));
    qh = h;
  }
  return _mm512_cmplt_epi32_mask(ql, zero) | _mm512_cmpgt_epi32_mask(ql, qh);
}

// EndPairFromIndex for 16 indices at a time (EndPairGuess); a block failing its check takes the scalar path.
KVT_AVX512 bool EndPairs(const uint32_t* index, size_t n, int grid_max, uint16_t* q_low, uint16_t* q_high) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512i x = _mm512_loadu_si512(index + i);
    if (_mm512_cmpgt_epu32_mask(x, _mm512_set1_epi32(MaxEndPairIndex(grid_max)))) return false;
    __m512i low, h;
    if (EndPairGuess(x, grid_max, low, h)) {
      if (!RefEndPairs(index + i, kLanes, grid_max, q_low + i, q_high + i)) return false;
      continue;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q_low + i), _mm512_cvtepi32_epi16(low));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q_high + i), _mm512_cvtepi32_epi16(h));
  }
  return RefEndPairs(index + i, n - i, grid_max, q_low + i, q_high + i);
}

// 16 end-pair fields (2 E bytes, E = bits) at a time: field l of a block is the low E bits of the 64-bit window of
// the two 32-bit words it straddles, words (E l) / 32 and the next, shifted right by (E l) % 32 (the same for every
// block: a block starts on a byte boundary). UnpackEnds and DecodeChunkParameters read the fields through it.
class EndFieldBlocks {
 public:
  KVT_AVX512 EndFieldBlocks(const uint8_t* in, size_t n, int bits)
      : in_(in), bytes_(EndPairBytes(n, bits)), block_(kLanes * static_cast<size_t>(bits) / 8) {
    alignas(64) int32_t words[kLanes], shifts[kLanes];
    for (int l = 0; l < kLanes; ++l) words[l] = l * bits / 32, shifts[l] = l * bits % 32;
    word_ = _mm512_load_si512(words);
    shift_ = _mm512_load_si512(shifts);
    up_ = _mm512_sub_epi32(_mm512_set1_epi32(32), shift_);  // 32 for shift 0: sllv gives 0
    next_ = _mm512_add_epi32(word_, _mm512_set1_epi32(1));
    field_ = _mm512_set1_epi32(static_cast<int>((1u << bits) - 1));
  }
  size_t block_bytes() const { return block_; }
  // The 16 fields of the block starting at byte `at` (a multiple of block_bytes() below the fields' end).
  KVT_AVX512 __m512i Fields(size_t at) const {
    const size_t avail = bytes_ - at;  // >= block; words past the fields' bytes read as zero
    const __mmask64 load = avail >= 48 ? (__mmask64{1} << 48) - 1 : (__mmask64{1} << avail) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(load, in_ + at);
    const __m512i low = _mm512_srlv_epi32(_mm512_permutexvar_epi32(word_, v), shift_);
    const __m512i high = _mm512_sllv_epi32(_mm512_permutexvar_epi32(next_, v), up_);
    return _mm512_and_si512(_mm512_or_si512(low, high), field_);
  }

 private:
  const uint8_t* in_;
  size_t bytes_, block_;
  __m512i word_, shift_, up_, next_, field_;
};

// UnpackEndPairs, 16 fields at a time (EndFieldBlocks).
KVT_AVX512 void UnpackEnds(const uint8_t* in, size_t n, int bits, uint32_t* index) {
  const EndFieldBlocks blocks(in, n, bits);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    _mm512_storeu_si512(index + i, blocks.Fields(i / kLanes * blocks.block_bytes()));
  }
  if (i < n) UnpackEndPairs(in + i / kLanes * blocks.block_bytes(), n - i, bits, index + i);
}

// LynxKernels::decode_chunk_parameters: per 16 chunk-channels, UnpackEnds' fields, EndPairs' pairs (a block
// failing its check takes RefEndPairs, as there) and Derive's ends, mu and sigma, in registers.
KVT_AVX512 bool DecodeChunkParameters(const uint8_t* ends, LynxPageMeta& meta) {
  const int channels = meta.channels;
  if (channels % kLanes != 0) return false;
  const int bits = meta.end_pair_bits;
  const int grid_max = meta.grid_max;
  thread_local std::vector<float> centre, half;
  MakeFrames(meta, centre, half);
  const Grid grid = MakeGrid(grid_max);
  const EndFieldBlocks blocks(ends, meta.q_low.size(), bits);
  const __m512i max_index = _mm512_set1_epi32(static_cast<int>(MaxEndPairIndex(grid_max)));
  size_t at = 0;  // the current block's first byte
  for (int k = 0; k < meta.num_chunks; ++k) {
    const size_t base = static_cast<size_t>(k) * channels;
    for (int c0 = 0; c0 < channels; c0 += kLanes, at += blocks.block_bytes()) {
      const __m512i x = blocks.Fields(at);
      if (_mm512_cmpgt_epu32_mask(x, max_index)) return false;
      __m512i ql, qh;
      if (EndPairGuess(x, grid_max, ql, qh)) {
        alignas(64) uint32_t index[kLanes], lows[kLanes], highs[kLanes];
        alignas(32) uint16_t q_low[kLanes], q_high[kLanes];
        _mm512_store_si512(index, x);
        if (!RefEndPairs(index, kLanes, grid_max, q_low, q_high)) return false;
        for (int l = 0; l < kLanes; ++l) lows[l] = q_low[l], highs[l] = q_high[l];
        ql = _mm512_load_si512(lows);
        qh = _mm512_load_si512(highs);
      }
      const __m512 lo = _mm512_loadu_ps(&meta.lo[c0]), hi = _mm512_loadu_ps(&meta.hi[c0]);
      const __m512 fc = _mm512_loadu_ps(&centre[c0]), fh = _mm512_loadu_ps(&half[c0]);
      __m512 mu, sigma;
      MuSigma(Ends(ql, lo, hi, fc, fh, grid), Ends(qh, lo, hi, fc, fh, grid), mu, sigma);
      _mm512_storeu_ps(&meta.mu[base + c0], mu);
      _mm512_storeu_ps(&meta.sigma[base + c0], sigma);
    }
  }
  return true;
}

// RefPackEndPairs with the pair indices computed 16 at a time (1024 per block, so every block starts on a byte
// boundary and PackEndPairs' groups of 8 run through most of it); the packing is the shared PackEndPairs.
KVT_AVX512 void PackEnds(const uint16_t* q_low, const uint16_t* q_high, size_t n, int bits, uint8_t* out) {
  if (PackNarrowEnds(q_low, q_high, n, bits, out)) return;  // VBMI, even widths <= 16
  constexpr size_t kBlock = 1024;
  alignas(64) uint32_t index[kBlock];
  const __m512i one = _mm512_set1_epi32(1);
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
#pragma GCC unroll 4
    for (size_t j = 0; j < kBlock; j += kLanes) {
      const __m512i lo =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q_low + i + j)));
      const __m512i hi =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q_high + i + j)));
      const __m512i tri = _mm512_srli_epi32(_mm512_mullo_epi32(hi, _mm512_add_epi32(hi, one)), 1);
      _mm512_store_si512(index + j, _mm512_add_epi32(tri, lo));
    }
    PackEndPairs(index, kBlock, bits, out + i / 8 * bits);
  }
  if (i < n) RefPackEndPairs(q_low + i, q_high + i, n - i, bits, out + i / 8 * bits);
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
  static const LynxKernels k{Stats,  Codes,      Reconstruct,  AllFinite,          Derive,
                             EndPairs, UnpackEnds, PackEnds,     CodesNibbles,       ReconstructNibbles,
                             Avx512ChunkExtremes, Avx512ApplyChunkExtremes,
                             Avx512ChunkSampledSingles,
                             StatsFrameSpikes,
                             /*stats_derive=*/true,
                             DecodeChunkParameters};
  return k;
}

}  // namespace kvt::codec::internal
