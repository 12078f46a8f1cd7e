// AVX2 search of the exact-extremes rule's table side (lynx_extremes.h): 32 channels of a chunk's code bytes a
// vector, the chunk's rows folded into "seen once" / "seen again" bit masks (movemask of byte equals). Compiled
// for the target with function attributes; the kernel table only hands it out on CPUs with AVX2.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/internal/lynx_extremes.h"
#include "codec/internal/lynx_math.h"

#define KVT_AVX2 __attribute__((target("avx2")))

namespace kvt::codec::internal {
namespace {

// Row r's 32 code bytes from channel c0 (fewer at the row's end: zero-padded, and masked out by the caller).
KVT_AVX2 inline __m256i LoadBlock(const uint8_t* codes, size_t row_bytes, int r, int c0, int width) {
  const uint8_t* p = codes + r * row_bytes + c0;
  if (width == 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  alignas(32) uint8_t tail[32] = {};
  std::memcpy(tail, p, width);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
}

KVT_AVX2 inline uint32_t Equal(__m256i x, __m256i v) {
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, v)));
}

}  // namespace

KVT_AVX2 size_t Avx2ChunkSampledSingles(const uint8_t* codes, int rows, int channels, uint8_t high, uint8_t top_pos,
                                        uint8_t top_neg, int phase, uint32_t* out) {
  const __m256i h = _mm256_set1_epi8(static_cast<char>(high));
  const __m256i tp = _mm256_set1_epi8(static_cast<char>(top_pos));
  const __m256i tn = _mm256_set1_epi8(static_cast<char>(top_neg));
  const size_t row_bytes = static_cast<size_t>(channels);
  const int first_sampled = FirstSampledRow(phase);
  const int blocks = (channels + 31) / 32;
  thread_local std::vector<uint32_t> singles;  // per block: positive then negative single masks
  singles.resize(2 * static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) {
    const int c0 = 32 * b;
    const int width = channels - c0 < 32 ? channels - c0 : 32;
    SeenMasks<uint32_t> seen_p, seen_n;
    for (int r = 0; r < rows; ++r) {
      const __m256i x = _mm256_and_si256(LoadBlock(codes, row_bytes, r, c0, width), h);
      seen_p.Add(Equal(x, tp));
      seen_n.Add(Equal(x, tn));
    }
    const uint32_t valid = width == 32 ? ~0u : (1u << width) - 1;  // zero padding can match too
    singles[2 * b] = seen_p.Single() & valid;
    singles[2 * b + 1] = seen_n.Single() & valid;
  }
  size_t n = 0;
  for (int r = first_sampled; r < rows; r += kAnchorSampleStride) {
    for (int b = 0; b < blocks; ++b) {
      if ((singles[2 * b] | singles[2 * b + 1]) == 0) continue;
      const int c0 = 32 * b;
      const int width = channels - c0 < 32 ? channels - c0 : 32;
      const __m256i x = _mm256_and_si256(LoadBlock(codes, row_bytes, r, c0, width), h);
      for (uint32_t m = (Equal(x, tp) & singles[2 * b]) | (Equal(x, tn) & singles[2 * b + 1]); m != 0; m &= m - 1) {
        out[n++] = static_cast<uint32_t>(r * row_bytes + c0 + __builtin_ctz(m));
      }
    }
  }
  return n;
}

}  // namespace kvt::codec::internal
