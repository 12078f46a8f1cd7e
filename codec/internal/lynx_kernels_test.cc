// The kernels' optional fused paths against the reference loops they replace, value for value.
#include "codec/internal/lynx_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "codec/options.h"
#include "codec/scheme.h"
#include "gtest/gtest.h"

namespace kvt::codec::internal {
namespace {

// Every pair index of a grid, padded to whole 16-channel chunks with random valid ones: exhaustive up to 17
// bits; past that the indices beside every triangular number t(h) (where the square root's guess is closest to
// the next row) and random others.
std::vector<uint32_t> IndicesOf(int bits, int channels, std::mt19937& rng) {
  const uint32_t max = MaxEndPairIndex(EndGridMax(bits));
  std::vector<uint32_t> index;
  if (bits <= 17) {
    for (uint32_t i = 0; i <= max; ++i) index.push_back(i);
  } else {
    for (uint32_t h = 1; h <= static_cast<uint32_t>(EndGridMax(bits)); ++h) {
      const uint32_t t = h * (h + 1) / 2;
      for (uint32_t i : {t - 1, t, t + 1}) {
        if (i <= max) index.push_back(i);
      }
    }
    index.push_back(max);
    std::uniform_int_distribution<uint32_t> any(0, max);
    for (int i = 0; i < 50000; ++i) index.push_back(any(rng));
  }
  std::uniform_int_distribution<uint32_t> any(0, max);
  while (index.size() % channels != 0) index.push_back(any(rng));
  return index;
}

// A page's metadata around `index` (channels ranges drawn to include constant channels, a zero end and the widest
// finite frame), as the decoder has it before deriving: lo, hi and, packed, the end pairs.
LynxPageMeta MetaFor(const std::vector<uint32_t>& index, int bits, int channels, std::mt19937& rng,
                     std::vector<uint8_t>& packed) {
  LynxPageMeta meta;
  const int chunks = static_cast<int>(index.size() / channels);
  meta.Resize(16 * chunks, channels, 16, /*spikes=*/false, bits, /*frame_spikes=*/0);
  std::normal_distribution<float> value(0.0f, 3.0f);
  for (int c = 0; c < channels; ++c) {
    float a = value(rng), b = value(rng);
    if (a > b) std::swap(a, b);
    switch (c % 8) {
      case 0: b = a; break;                        // constant channel: half 0
      case 1: a = 0.0f; break;                     // an end at zero
      case 2: a = -3.4e38f, b = 3.4e38f; break;    // the widest frame
      case 3: a = -1e-30f, b = 1e-30f; break;      // a tiny one
      default: break;
    }
    meta.lo[c] = a;
    meta.hi[c] = b;
  }
  packed.assign(EndPairBytes(index.size(), bits), 0);
  PackEndPairs(index.data(), index.size(), bits, packed.data());
  return meta;
}

TEST(LynxKernelsTest, FusedDecodeOfChunkParametersEqualsUnpackPairsAndDeriveAtEveryWidth) {
  if (!ImplAvailable(CodecImpl::kAvx512)) GTEST_SKIP() << "no AVX-512";
  const LynxKernels& k = Avx512LynxKernels();
  ASSERT_NE(k.decode_chunk_parameters, nullptr);
  std::mt19937 rng(35);
  for (int bits = kMinEndPairBits; bits <= kMaxEndPairBits; ++bits) {
    SCOPED_TRACE(bits);
    const int channels = bits % 2 == 0 ? 48 : 16;
    const std::vector<uint32_t> index = IndicesOf(bits, channels, rng);
    std::vector<uint8_t> packed;
    LynxPageMeta ref = MetaFor(index, bits, channels, rng, packed);
    LynxPageMeta fused = ref;
    std::vector<uint32_t> unpacked(index.size());
    UnpackEndPairs(packed.data(), index.size(), bits, unpacked.data());
    ASSERT_EQ(unpacked, index);
    ASSERT_TRUE(RefEndPairs(unpacked.data(), index.size(), ref.grid_max, ref.q_low.data(), ref.q_high.data()));
    ref.Derive();
    ASSERT_TRUE(k.decode_chunk_parameters(packed.data(), fused));
    for (size_t i = 0; i < index.size(); ++i) {
      // Bit for bit (the reconstruction multiplies by sigma: a -0 against a +0 would still give equal values,
      // but the kernels promise the same floats).
      ASSERT_EQ(std::memcmp(&ref.mu[i], &fused.mu[i], 4), 0) << "index " << index[i] << " at " << i;
      ASSERT_EQ(std::memcmp(&ref.sigma[i], &fused.sigma[i], 4), 0) << "index " << index[i] << " at " << i;
    }
    for (int c = 0; c < channels; ++c) {
      EXPECT_EQ(ref.frames[c].centre, fused.frames[c].centre);
      EXPECT_EQ(ref.frames[c].half, fused.frames[c].half);
      EXPECT_EQ(ref.frames[c].lo, fused.frames[c].lo);
      EXPECT_EQ(ref.frames[c].hi, fused.frames[c].hi);
      EXPECT_EQ(ref.frames[c].grid_max, fused.frames[c].grid_max);
    }
  }
}

TEST(LynxKernelsTest, FusedDecodeOfChunkParametersRefusesAnIndexPastTheGridAndOddChannelCounts) {
  if (!ImplAvailable(CodecImpl::kAvx512)) GTEST_SKIP() << "no AVX-512";
  const LynxKernels& k = Avx512LynxKernels();
  std::mt19937 rng(36);
  for (int bits : {8, 14, 23}) {
    const int channels = 32;
    std::vector<uint32_t> index(static_cast<size_t>(channels) * 5, 0);
    std::uniform_int_distribution<uint32_t> any(0, MaxEndPairIndex(EndGridMax(bits)));
    for (uint32_t& i : index) i = any(rng);
    // Past the grid in the middle of a chunk, and in the last lane of the last block.
    for (size_t bad : {size_t{2} * channels + 7, index.size() - 1}) {
      std::vector<uint32_t> edited = index;
      edited[bad] = MaxEndPairIndex(EndGridMax(bits)) + 1;
      std::vector<uint8_t> packed;
      LynxPageMeta meta = MetaFor(edited, bits, channels, rng, packed);
      EXPECT_FALSE(k.decode_chunk_parameters(packed.data(), meta)) << bits << " bad at " << bad;
    }
    std::vector<uint8_t> packed;
    LynxPageMeta meta = MetaFor(index, bits, channels, rng, packed);
    EXPECT_TRUE(k.decode_chunk_parameters(packed.data(), meta)) << bits;
  }
  // 24 channels: the fused pass leaves such pages to the unfused one.
  std::vector<uint32_t> index(24 * 2, 5);
  std::vector<uint8_t> packed;
  LynxPageMeta meta = MetaFor(index, 14, 24, rng, packed);
  EXPECT_FALSE(k.decode_chunk_parameters(packed.data(), meta));
}

TEST(LynxKernelsTest, EveryImplementationPacksEndPairsAsTheReferenceAtEveryWidthAndLengthWritingNoBytePast) {
  std::mt19937 rng(37);
  for (CodecImpl impl : {CodecImpl::kAvx2, CodecImpl::kAvx512}) {
    if (!ImplAvailable(impl)) continue;
    const LynxKernels& k = KernelsFor(impl);
    for (int bits = kMinEndPairBits; bits <= kMaxEndPairBits; ++bits) {
      const int grid = EndGridMax(bits);
      std::uniform_int_distribution<int> any(0, grid);
      for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{1024},
                       size_t{1029}, size_t{4096 + 15}}) {
        std::vector<uint16_t> q_low(n), q_high(n);
        for (size_t i = 0; i < n; ++i) {
          int a = any(rng), b = any(rng);
          if (a > b) std::swap(a, b);
          // The grid's corners too: (0, 0) and (G, G), whose index is the largest.
          if (i % 7 == 0) a = b = (i % 14 == 0) ? 0 : grid;
          q_low[i] = static_cast<uint16_t>(a);
          q_high[i] = static_cast<uint16_t>(b);
        }
        const size_t bytes = EndPairBytes(n, bits);
        std::vector<uint8_t> want(bytes + 64, 0xA5), got(bytes + 64, 0xA5);
        RefPackEndPairs(q_low.data(), q_high.data(), n, bits, want.data());
        k.pack_end_pairs(q_low.data(), q_high.data(), n, bits, got.data());
        ASSERT_EQ(got, want) << ImplName(impl) << " bits " << bits << " n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace kvt::codec::internal
