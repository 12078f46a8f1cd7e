// The scalar reference of the lynx inner loops: the spec, written for clarity, not speed.
#include <algorithm>
#include <cmath>
#include <limits>

#include "codec/internal/lynx_extremes.h"
#include "codec/internal/lynx_frame_spikes.h"
#include "codec/internal/lynx_kernels.h"

namespace kvt::codec::internal {
namespace {

float CanonicalZero(float x) { return x == 0.0f ? 0.0f : x; }

// The target centre of values x[0..n) (n >= 1) read with `at`: midrange 0.5f * min + 0.5f * max, or the mean
// as sum over t in order of (x_t * (1.0f / n)), clamped into [min, max].
template <typename At>
void ChunkCentre(At at, int n, Centering centering, float& cmin, float& cmax, float& centre) {
  cmin = std::numeric_limits<float>::infinity();
  cmax = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < n; ++t) {
    float x = at(t);
    if (x < cmin) cmin = x;
    if (x > cmax) cmax = x;
  }
  if (centering == Centering::kMidrange) {
    float a = 0.5f * cmin;
    float b = 0.5f * cmax;
    centre = a + b;
  } else {
    const float inv = 1.0f / static_cast<float>(n);
    float sum = 0.0f;
    for (int t = 0; t < n; ++t) {
      float term = at(t) * inv;
      sum = sum + term;
    }
    centre = sum;
  }
  centre = Clamp(centre, cmin, cmax);
}

void QuantizeChunk(const ChannelFrame& frame, Centering centering, float cmin, float cmax, float centre,
                   uint16_t& q_low, uint16_t& q_high) {
  int a, b;
  QuantizeChunkEnds(frame, centering, cmin, cmax, centre, a, b);
  q_low = static_cast<uint16_t>(a);
  q_high = static_cast<uint16_t>(b);
}

}  // namespace

void RefStatsRange(const PageView& page, Centering centering, LynxPageMeta& meta, int c_begin, int c_end) {
  const int channels = page.channels;
  for (int c = c_begin; c < c_end; ++c) {
    float lo = std::numeric_limits<float>::infinity();
    float hi = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < page.tokens; ++t) {
      float x = page.at(t, c);
      if (x < lo) lo = x;
      if (x > hi) hi = x;
    }
    meta.lo[c] = CanonicalZero(lo);
    meta.hi[c] = CanonicalZero(hi);
    const ChannelFrame frame = MakeChannelFrame(meta.lo[c], meta.hi[c], meta.grid_max);
    for (int k = 0; k < meta.num_chunks; ++k) {
      const int t0 = k * meta.chunk_len;
      float cmin, cmax, centre;
      ChunkCentre([&](int t) { return page.at(t0 + t, c); }, meta.chunk_len, centering, cmin, cmax, centre);
      const size_t i = static_cast<size_t>(k) * channels + c;
      QuantizeChunk(frame, centering, cmin, cmax, centre, meta.q_low[i], meta.q_high[i]);
    }
  }
}

void QuantizeChunkRange(LynxPageMeta& meta, Centering centering, const float* cmin, const float* cmax,
                        const float* centre, int c_begin, int c_end) {
  for (int c = c_begin; c < c_end; ++c) {
    const ChannelFrame frame = MakeChannelFrame(meta.lo[c], meta.hi[c], meta.grid_max);
    for (int k = 0; k < meta.num_chunks; ++k) {
      const size_t i = static_cast<size_t>(k) * meta.channels + c;
      QuantizeChunk(frame, centering, cmin[i], cmax[i], centre[i], meta.q_low[i], meta.q_high[i]);
    }
  }
}

void RefCodesRange(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes,
                   int c_begin, int c_end) {
  const int sign_shift = tables.bits - 1;
  for (int t = 0; t < page.tokens; ++t) {
    const int k = t / meta.chunk_len;
    for (int c = c_begin; c < c_end; ++c) {
      const size_t i = static_cast<size_t>(k) * page.channels + c;
      const float xf = FinalValue(page.at(t, c), meta.mu[i], meta.inv_sigma[i]);
      const int neg = xf < 0.0f ? 1 : 0;
      const int mag = MagnitudeCode(tables, std::fabs(xf));
      codes[static_cast<size_t>(t) * page.channels + c] = static_cast<uint8_t>((neg << sign_shift) | mag);
    }
  }
}

void RefReconstructRange(const uint8_t* prefix, const LynxPageMeta& meta, const float* table,
                         const MutablePageView& out, int c_begin, int c_end) {
  for (int t = 0; t < meta.tokens; ++t) {
    const int k = t / meta.chunk_len;
    for (int c = c_begin; c < c_end; ++c) {
      const size_t i = static_cast<size_t>(k) * meta.channels + c;
      const float v = table[prefix[static_cast<size_t>(t) * meta.channels + c]];
      out.at(t, c) = Reconstruct(v, meta.mu[i], meta.sigma[i], meta.frames[c]);
    }
  }
}

namespace {

bool RefAllFinite(const PageView& page);

bool RefStats(const PageView& page, Centering centering, LynxPageMeta& meta) {
  if (!RefAllFinite(page)) return false;
  RefStatsRange(page, centering, meta, 0, page.channels);
  return true;
}
void RefCodes(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables, uint8_t* codes) {
  RefCodesRange(page, meta, tables, codes, 0, page.channels);
}
void RefReconstruct(const uint8_t* prefix, const LynxPageMeta& meta, const float* table, int /*known*/,
                    const MutablePageView& out) {
  RefReconstructRange(prefix, meta, table, out, 0, meta.channels);
}

bool RefAllFinite(const PageView& page) {
  for (int t = 0; t < page.tokens; ++t) {
    for (int c = 0; c < page.channels; ++c) {
      if (!std::isfinite(page.at(t, c))) return false;
    }
  }
  return true;
}

}  // namespace

void LynxPageMeta::Resize(int tokens_in, int channels_in, int chunk_len_in, bool spikes_in, int end_pair_bits_in,
                          int frame_spikes_in) {
  tokens = tokens_in;
  channels = channels_in;
  chunk_len = chunk_len_in;
  num_chunks = tokens / chunk_len;
  spikes = spikes_in;
  end_pair_bits = end_pair_bits_in;
  grid_max = EndGridMax(end_pair_bits);
  frame_spikes = frame_spikes_in;
  const size_t chunk_values = static_cast<size_t>(num_chunks) * channels;
  // resize, not assign: every element is written before it is read (stats or the container, then Derive), so
  // a reused LynxPageMeta need not be cleared.
  lo.resize(channels);
  hi.resize(channels);
  q_low.resize(chunk_values);
  q_high.resize(chunk_values);
  spike_value.resize(spikes ? chunk_values : 0);
  spike_index.resize(spikes ? chunk_values : 0);
  frames.resize(channels);
  mu.resize(chunk_values);
  sigma.resize(chunk_values);
  inv_sigma.resize(chunk_values);
  frame_token.resize(static_cast<size_t>(frame_spikes) * channels);
  frame_value.resize(static_cast<size_t>(frame_spikes) * channels);
}

void DeriveLynxMeta(LynxPageMeta& meta) { meta.Derive(); }

void RefPackEndPairs(const uint16_t* q_low, const uint16_t* q_high, size_t n, int bits, uint8_t* out) {
  // 64 fields at a time (64 E bits: every block starts on a byte boundary), so no page-sized scratch.
  constexpr size_t kBlock = 64;
  uint32_t index[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    for (size_t j = 0; j < m; ++j) index[j] = EndPairIndex(q_low[i + j], q_high[i + j]);
    PackEndPairs(index, m, bits, out + i / 8 * bits);
  }
}

bool RefEndPairs(const uint32_t* index, size_t n, int grid_max, uint16_t* q_low, uint16_t* q_high) {
  for (size_t i = 0; i < n; ++i) {
    int a, b;
    if (!EndPairFromIndex(index[i], grid_max, a, b)) return false;
    q_low[i] = static_cast<uint16_t>(a);
    q_high[i] = static_cast<uint16_t>(b);
  }
  return true;
}

void LynxPageMeta::Derive() {
  for (int c = 0; c < channels; ++c) frames[c] = MakeChannelFrame(lo[c], hi[c], grid_max);
  for (int k = 0; k < num_chunks; ++k) {
    for (int c = 0; c < channels; ++c) {
      const size_t i = static_cast<size_t>(k) * channels + c;
      ChunkCentreAndWidth(frames[c], q_low[i], q_high[i], mu[i], sigma[i]);
      inv_sigma[i] = InverseSigma(sigma[i]);
    }
  }
}

void SpikeStats(const PageView& page, Centering centering, LynxPageMeta& meta) {
  const int channels = page.channels;
  const int n = meta.chunk_len;
  std::vector<float> rest(n);
  std::vector<float> cmin_v(static_cast<size_t>(meta.num_chunks)), cmax_v(cmin_v.size()), centre_v(cmin_v.size());
  for (int c = 0; c < channels; ++c) {
    float lo = std::numeric_limits<float>::infinity();
    float hi = -std::numeric_limits<float>::infinity();
    for (int k = 0; k < meta.num_chunks; ++k) {
      const int t0 = k * n;
      const size_t i = static_cast<size_t>(k) * channels + c;
      float cmin, cmax, centre;
      ChunkCentre([&](int t) { return page.at(t0 + t, c); }, n, centering, cmin, cmax, centre);
      // The spike: the first token with the largest |x - centre| (float subtraction, may be inf: still ordered).
      int spike = 0;
      float best = -1.0f;
      for (int t = 0; t < n; ++t) {
        float d = std::fabs(page.at(t0 + t, c) - centre);
        if (d > best) {
          best = d;
          spike = t;
        }
      }
      meta.spike_index[i] = static_cast<uint8_t>(spike);
      meta.spike_value[i] = page.at(t0 + spike, c);
      int m = 0;
      for (int t = 0; t < n; ++t) {
        if (t != spike) rest[m++] = page.at(t0 + t, c);
      }
      if (m == 0) {
        cmin_v[k] = cmax_v[k] = centre_v[k] = std::numeric_limits<float>::quiet_NaN();  // marks "no values"
        continue;
      }
      ChunkCentre([&](int t) { return rest[t]; }, m, centering, cmin, cmax, centre);
      cmin_v[k] = cmin;
      cmax_v[k] = cmax;
      centre_v[k] = centre;
      if (cmin < lo) lo = cmin;
      if (cmax > hi) hi = cmax;
    }
    if (lo > hi) lo = hi = 0.0f;  // no non-spike value in this channel (one-token chunks)
    meta.lo[c] = CanonicalZero(lo);
    meta.hi[c] = CanonicalZero(hi);
    const ChannelFrame frame = MakeChannelFrame(meta.lo[c], meta.hi[c], meta.grid_max);
    for (int k = 0; k < meta.num_chunks; ++k) {
      const size_t i = static_cast<size_t>(k) * channels + c;
      if (std::isnan(centre_v[k])) {
        meta.q_low[i] = 0;
        meta.q_high[i] = 0;
        continue;
      }
      QuantizeChunk(frame, centering, cmin_v[k], cmax_v[k], centre_v[k], meta.q_low[i], meta.q_high[i]);
    }
  }
}

const LynxKernels& ReferenceLynxKernels() {
  static const LynxKernels k{RefStats,       RefCodes,    RefReconstruct,  RefAllFinite, DeriveLynxMeta,
                             RefEndPairs, UnpackEndPairs, RefPackEndPairs, nullptr, nullptr,
                             RefChunkExtremes, RefApplyChunkExtremes,
                             RefChunkSampledSingles,
                             nullptr};
  return k;
}

const LynxKernels& KernelsFor(CodecImpl impl) {
  switch (impl) {
    case CodecImpl::kAvx2:
      return Avx2LynxKernels();
    case CodecImpl::kAvx512:
      return Avx512LynxKernels();
    default:
      return ReferenceLynxKernels();
  }
}

}  // namespace kvt::codec::internal
