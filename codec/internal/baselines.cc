#include "codec/internal/baselines.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/internal/bitpack.h"
#include "numerics/e4m3.h"
#include "numerics/float16.h"

namespace kvt::codec::internal {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

bool F16Finite(uint16_t h) { return ((h >> 10) & 0x1F) != 0x1F; }

#define KVT_AVX2 __attribute__((target("avx2")))

// cmin[c] = cmin[c] < x ? cmin[c] : x over the chunk's rows, and the same for cmax, 8 channels at a time; returns
// the first channel left to the scalar loop. MINPS/MAXPS return their second operand on ties and NaNs, which is
// the scalar loop's comparison exactly (so a chunk of +0 and -0 keeps the same zero).
KVT_AVX2 int ChunkMinMaxAvx2(const PageView& page, int t0, int chunk_len, float* cmin, float* cmax) {
  const int vec_channels = page.channels / 8 * 8;
  for (int c = 0; c < vec_channels; c += 8) {
    __m256 lo = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    __m256 hi = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int t = t0; t < t0 + chunk_len; ++t) {
      const __m256 x = _mm256_loadu_ps(page.data + static_cast<size_t>(t) * page.stride() + c);
      lo = _mm256_min_ps(lo, x);
      hi = _mm256_max_ps(hi, x);
    }
    _mm256_storeu_ps(cmin + c, lo);
    _mm256_storeu_ps(cmax + c, hi);
  }
  return vec_channels;
}

// codes = s > 0 ? clamp(nearbyint((x - m) / s), 0, qmax) : 0 for the chunk's rows, 8 channels at a time (the
// scalar loop's operations: subtract, divide, round to nearest even, then max and min with its operand order);
// returns the first channel left to the scalar loop.
KVT_AVX2 int QuantizeChunkAvx2(const PageView& page, int t0, int chunk_len, const float* m, const float* s, float qmax,
                               uint8_t* codes) {
  const int vec_channels = page.channels / 8 * 8;
  const __m256 zero = _mm256_setzero_ps();
  const __m256 top = _mm256_set1_ps(qmax);
  for (int t = t0; t < t0 + chunk_len; ++t) {
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    uint8_t* out = codes + static_cast<size_t>(t) * page.channels;
    for (int c = 0; c < vec_channels; c += 8) {
      const __m256 sv = _mm256_loadu_ps(s + c);
      __m256 q = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(m + c)), sv);
      q = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm256_max_ps(q, zero);                                 // q > 0 ? q : 0
      q = _mm256_min_ps(q, top);                                  // q < qmax ? q : qmax
      q = _mm256_and_ps(q, _mm256_cmp_ps(sv, zero, _CMP_GT_OQ));  // a flat chunk (s == 0): every code 0
      const __m256i i32 = _mm256_cvttps_epi32(q);
      const __m128i u16 = _mm_packus_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), _mm_packus_epi16(u16, u16));
    }
  }
  return vec_channels;
}

}  // namespace

void EncodeBf16(const PageView& page, uint8_t* payload) {
  for (int t = 0; t < page.tokens; ++t) {
    uint8_t* row = payload + 2 * static_cast<size_t>(t) * page.channels;
    for (int c = 0; c < page.channels; ++c) Store<uint16_t>(row + 2 * c, numerics::FloatToBf16(page.at(t, c)));
  }
}

absl::Status DecodeBf16(const uint8_t* payload, const MutablePageView& out) {
  for (int t = 0; t < out.tokens; ++t) {
    const uint8_t* row = payload + 2 * static_cast<size_t>(t) * out.channels;
    uint32_t non_finite = 0;
    for (int c = 0; c < out.channels; ++c) {
      const uint16_t b = Load<uint16_t>(row + 2 * c);
      non_finite |= (b & 0x7F80) == 0x7F80;
      out.at(t, c) = numerics::Bf16ToFloat(b);
    }
    if (non_finite) return absl::DataLossError(absl::StrCat("bf16 container: NaN/Inf value in token ", t));
  }
  return absl::OkStatus();
}

void EncodeUniform(const PageView& page, int bits, int chunk_len, uint8_t* payload, bool avx2) {
  const int channels = page.channels;
  const int num_chunks = page.tokens / chunk_len;
  const size_t chunk_values = static_cast<size_t>(num_chunks) * channels;
  const float qmax = static_cast<float>((1 << bits) - 1);
  uint8_t* mins = payload;
  uint8_t* scales = payload + 2 * chunk_values;
  std::vector<uint8_t> codes(page.num_values());
  std::vector<float> cmin(channels), cmax(channels), m(channels), s(channels);
  // Row by row, so the page streams through the cache. The comparisons are glibc's fminf / fmaxf for non-NaN
  // operands (the first operand unless the second is strictly smaller / larger), which the CUDA kernels mirror.
  for (int k = 0; k < num_chunks; ++k) {
    const int t0 = k * chunk_len;
    const int first_scalar = avx2 ? ChunkMinMaxAvx2(page, t0, chunk_len, cmin.data(), cmax.data()) : 0;
    for (int c = first_scalar; c < channels; ++c) {
      cmin[c] = std::numeric_limits<float>::infinity();
      cmax[c] = -std::numeric_limits<float>::infinity();
    }
    for (int t = t0; t < t0 + chunk_len; ++t) {
      const float* row = page.data + static_cast<size_t>(t) * page.stride();
      for (int c = first_scalar; c < channels; ++c) {
        cmin[c] = cmin[c] < row[c] ? cmin[c] : row[c];
        cmax[c] = cmax[c] > row[c] ? cmax[c] : row[c];
      }
    }
    for (int c = 0; c < channels; ++c) {
      const uint16_t m16 = numerics::FloatToF16(cmin[c], numerics::F16Round::kDown);
      m[c] = numerics::F16ToFloat(m16);
      const float span = cmax[c] - m[c];
      const float want = span / qmax;
      const uint16_t s16 = numerics::FloatToF16(want, numerics::F16Round::kUp);
      s[c] = numerics::F16ToFloat(s16);
      const size_t i = static_cast<size_t>(k) * channels + c;
      Store<uint16_t>(mins + 2 * i, m16);
      Store<uint16_t>(scales + 2 * i, s16);
    }
    const int first_scalar_q =
        avx2 ? QuantizeChunkAvx2(page, t0, chunk_len, m.data(), s.data(), qmax, codes.data()) : 0;
    for (int t = t0; t < t0 + chunk_len; ++t) {
      const float* row = page.data + static_cast<size_t>(t) * page.stride();
      uint8_t* out = codes.data() + static_cast<size_t>(t) * channels;
      for (int c = first_scalar_q; c < channels; ++c) {
        float q = std::nearbyint((row[c] - m[c]) / s[c]);
        q = q > 0.0f ? q : 0.0f;
        q = q < qmax ? q : qmax;
        out[c] = s[c] > 0.0f ? static_cast<uint8_t>(q) : 0;  // s == 0: a flat chunk, every code 0
      }
    }
  }
  PackField(codes.data(), codes.size(), 0, bits, payload + 4 * chunk_values);
}

absl::Status DecodeUniform(const uint8_t* payload, int bits, int chunk_len, const MutablePageView& out) {
  const int channels = out.channels;
  const int num_chunks = out.tokens / chunk_len;
  const size_t chunk_values = static_cast<size_t>(num_chunks) * channels;
  const uint8_t* mins = payload;
  const uint8_t* scales = payload + 2 * chunk_values;
  std::vector<float> m(chunk_values), s(chunk_values);
  for (size_t i = 0; i < chunk_values; ++i) {
    const uint16_t m16 = Load<uint16_t>(mins + 2 * i);
    const uint16_t s16 = Load<uint16_t>(scales + 2 * i);
    if (!F16Finite(m16) || !F16Finite(s16)) {
      return absl::DataLossError(absl::StrCat("int", bits, " container: non-finite fp16 metadata at chunk ",
                                              i / channels, ", channel ", i % channels));
    }
    m[i] = numerics::F16ToFloat(m16);
    s[i] = numerics::F16ToFloat(s16);
  }
  std::vector<uint8_t> codes(out.num_values());
  AppendField(payload + 4 * chunk_values, codes.size(), bits, /*first=*/true, codes.data());
  for (int t = 0; t < out.tokens; ++t) {
    const size_t k = static_cast<size_t>(t / chunk_len) * channels;
    for (int c = 0; c < channels; ++c) {
      const float prod = static_cast<float>(codes[static_cast<size_t>(t) * channels + c]) * s[k + c];
      out.at(t, c) = m[k + c] + prod;
    }
  }
  return absl::OkStatus();
}

void EncodeFp8(const PageView& page, uint8_t* payload) {
  const int channels = page.channels;
  const int groups = (channels + 127) / 128;
  uint8_t* scales = payload;
  uint8_t* codes = payload + 4 * static_cast<size_t>(page.tokens) * groups;
  for (int t = 0; t < page.tokens; ++t) {
    for (int g = 0; g < groups; ++g) {
      const int c0 = g * 128;
      const int c1 = c0 + 128 < channels ? c0 + 128 : channels;
      float amax = 0.0f;
      for (int c = c0; c < c1; ++c) amax = std::fmax(amax, std::fabs(page.at(t, c)));
      const float scale = amax / numerics::kE4m3Max;
      Store<float>(scales + 4 * (static_cast<size_t>(t) * groups + g), scale);
      for (int c = c0; c < c1; ++c) {
        const float y = scale > 0.0f ? page.at(t, c) / scale : 0.0f;
        codes[static_cast<size_t>(t) * channels + c] = numerics::FloatToE4m3(y);
      }
    }
  }
}

absl::Status DecodeFp8(const uint8_t* payload, const MutablePageView& out) {
  const int channels = out.channels;
  const int groups = (channels + 127) / 128;
  const uint8_t* scales = payload;
  const uint8_t* codes = payload + 4 * static_cast<size_t>(out.tokens) * groups;
  float table[256];
  for (int i = 0; i < 256; ++i) table[i] = numerics::E4m3IsNan(i) ? 0.0f : numerics::E4m3ToFloat(i);
  for (int t = 0; t < out.tokens; ++t) {
    for (int g = 0; g < groups; ++g) {
      const float scale = Load<float>(scales + 4 * (static_cast<size_t>(t) * groups + g));
      if (!std::isfinite(scale) || !(scale >= 0.0f) || !std::isfinite(scale * numerics::kE4m3Max)) {
        return absl::DataLossError(absl::StrCat("fp8 container: bad scale ", scale, " at token ", t, ", group ", g));
      }
      const int c0 = g * 128;
      const int c1 = c0 + 128 < channels ? c0 + 128 : channels;
      for (int c = c0; c < c1; ++c) {
        const uint8_t code = codes[static_cast<size_t>(t) * channels + c];
        if (numerics::E4m3IsNan(code)) {
          return absl::DataLossError(absl::StrCat("fp8 container: NaN code at token ", t, ", channel ", c));
        }
        out.at(t, c) = table[code] * scale;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::codec::internal
