// The CUDA encode kernels against the CPU reference: container bytes of every scheme on random and adversarial
// pages, read from NHD/HND paged layouts through scattered block ids; errors as Status codes. (Decodes:
// codec_cuda_decode_test.cc, in the same test binary.) Every test skips (GTEST_SKIP) when no CUDA device is present.
#include "codec/gpu/codec_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "codec/gpu/codec_cuda_test_util.h"
#include "common/cuda_util.h"
#include "codec/gpu/host_containers.h"
#include "numerics/float16.h"
#include "codec/internal/lynx_math.h"
#include "codec/test_pages.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu {
namespace {

using namespace ::kvt::codec::gpu::test_util;  // NOLINT: the test helpers


// Encodes `pages` (all tokens x channels) on the GPU from a paged cache and on the CPU reference from the stored
// values; expects identical container bytes (or the same error code).
void ExpectEncodeMatchesCpu(const std::string& scheme_name, const CodecOptions& options,
                            const std::vector<std::vector<float>>& pages, int tokens, int channels, KvDType dtype,
                            KvLayout layout, int block_tokens, int heads) {
  SCOPED_TRACE(scheme_name + " tokens " + std::to_string(tokens) + " channels " + std::to_string(channels));
  const Scheme scheme = MustParse(scheme_name);
  const int head_dim = channels / heads;
  const int bpp = (tokens + block_tokens - 1) / block_tokens;
  const int num_pages = static_cast<int>(pages.size());
  DeviceKv kv(dtype, layout, num_pages * bpp + 3, block_tokens, heads, head_dim);
  const std::vector<int32_t> ids = ScatteredIds(num_pages * bpp, num_pages * bpp + 3, 7 + tokens + channels);
  std::vector<std::vector<float>> stored;
  for (int p = 0; p < num_pages; ++p) stored.push_back(kv.Place(pages[p], tokens, ids, p));
  kv.Upload();

  CodecOptions cpu_options = options;
  cpu_options.impl = CodecImpl::kReference;
  std::vector<absl::StatusOr<EncodedPage>> want;
  for (int p = 0; p < num_pages; ++p) {
    want.push_back(EncodePage(scheme, cpu_options, PageView{stored[p].data(), tokens, channels, 0}));
  }
  absl::StatusOr<std::vector<EncodedPage>> got = EncodePagesCuda(scheme, options, kv.view(), tokens, ids);
  for (int p = 0; p < num_pages; ++p) {
    if (!want[p].ok()) {
      EXPECT_EQ(got.status().code(), want[p].status().code()) << "page " << p << ": " << want[p].status();
      return;
    }
  }
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), pages.size());
  for (int p = 0; p < num_pages; ++p) {
    const std::vector<uint8_t>& a = (*got)[p].bytes;
    const std::vector<uint8_t>& b = want[p]->bytes;
    ASSERT_EQ(a.size(), b.size()) << "page " << p;
    size_t first_diff = a.size();
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) {
        first_diff = i;
        break;
      }
    }
    EXPECT_EQ(first_diff, a.size()) << "page " << p << ": first differing byte " << first_diff << " of " << a.size()
                                    << " (gpu " << int(a[first_diff % a.size()]) << ", cpu "
                                    << int(b[first_diff % a.size()]) << ")";
  }
}


// The lynx tile encoder takes version 3's metadata only (LynxTileEncodeFits): 32-token chunks, 23-bit end pairs,
// no frame spikes. Its tests name those schemes and options.
std::string Tile(const char* name) { return std::string(name) + "+e23+f0"; }
CodecOptions TileOptions(CodecOptions o = CodecOptions{}) {
  o.chunk_tokens = 32;
  return o;
}

TEST(CudaEncodeTest, EveryFullSizeSchemeMatchesTheCpuReferenceByteForByte) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(256, 1024, 1), Realistic(256, 1024, 2)}, 256, 1024,
                           KvDType::kFloat32, KvLayout::kNhd, 16, 8);
  }
}

TEST(CudaEncodeTest, Bf16AndFp16InputsInHndLayoutMatchTheCpuReferenceOfTheStoredValues) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(256, 512, 3), Realistic(256, 512, 4)}, 256, 512,
                           KvDType::kBfloat16, KvLayout::kHnd, 32, 4);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(64, 256, 5)}, 64, 256, KvDType::kFloat16,
                           KvLayout::kNhd, 16, 2);
  }
}

TEST(CudaEncodeTest, AdversarialPagesMatchTheCpuReferenceByteForByte) {
  SKIP_WITHOUT_CUDA();
  for (const TestPage& page : AdversarialPages()) {
    SCOPED_TRACE(page.name);
    for (const std::string& name : AllGpuSchemes()) {
      ExpectEncodeMatchesCpu(name, CodecOptions{}, {page.data}, page.tokens, page.channels, KvDType::kFloat32,
                             KvLayout::kNhd, page.tokens, 1);
    }
  }
}

TEST(CudaEncodeTest, AdversarialPagesInTheLynxTileEncodersShapeMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  // Each adversarial page repeated over whole 32-token chunks and a multiple of 64 channels (the shape the lynx
  // tile encoder takes), fp32 NHD and bf16 HND.
  for (const TestPage& page : AdversarialPages()) {
    SCOPED_TRACE(page.name);
    const TestPage tiled = InTileShape(page);
    const int tokens = tiled.tokens, channels = tiled.channels;
    for (const char* name : {"lynx", "lynx8", "lynx4", "lynx-a2r6", "lynx-a2r2r4"}) {
      ExpectEncodeMatchesCpu(Tile(name), TileOptions(), {tiled.data}, tokens, channels, KvDType::kFloat32,
                             KvLayout::kNhd, 16, channels / 64);
      ExpectEncodeMatchesCpu(Tile(name), TileOptions(), {tiled.data, tiled.data}, tokens, channels, KvDType::kBfloat16,
                             KvLayout::kHnd, 32, channels / 64);
    }
  }
}

// Batches of more tiles than the device runs at once (bf16: 80 pages of 16 channel groups, 1280 tile-encoder
// blocks against an H100's 528 resident ones; fp32 and fp16: 40 pages, 640 blocks against 264 and 396), so that the
// pages are coded by several waves of blocks, each page's tables by its own first block. Every page differs, so
// that a row coded from the wrong page, or a table from another page's counts or from counts taken before every
// lane had counted, shows. Every scheme covers one stream layout of the kernel, and
// each runs on both row paths (16-token blocks; 12-token blocks, across which a lane's 8 rows run). These shapes are
// the tile encoder's (LynxTileEncodeFits); the test does not check which kernel ran.
struct LargeBatch {
  KvDType dtype;
  KvLayout layout;
  int block_tokens;
  int pages;
};
constexpr int kLargeTokens = 256, kLargeChannels = 1024, kLargeHeads = 8;
const LargeBatch kLargeBatches[] = {{KvDType::kBfloat16, KvLayout::kNhd, 16, 80},
                                    {KvDType::kFloat32, KvLayout::kHnd, 12, 40},
                                    {KvDType::kFloat16, KvLayout::kNhd, 16, 40}};

TEST(CudaEncodeTest, LargeBatchesOfMoreTilesThanResidentBlocksMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  std::vector<std::vector<float>> pages;
  for (int p = 0; p < 80; ++p) pages.push_back(Realistic(kLargeTokens, kLargeChannels, 1000 + p));
  for (const LargeBatch& batch : kLargeBatches) {
    const std::vector<std::vector<float>> batch_pages(pages.begin(), pages.begin() + batch.pages);
    for (const char* name : {"lynx", "lynx8", "lynx4", "lynx-a2r6", "lynx-a2r2r4"}) {
      ExpectEncodeMatchesCpu(Tile(name), TileOptions(), batch_pages, kLargeTokens, kLargeChannels, batch.dtype,
                             batch.layout, batch.block_tokens, kLargeHeads);
    }
  }
}

// Two large batches through one staging must encode as fresh staging does: nothing the first batch left in the
// staging (codes, metadata, anchor tables) may reach the second batch's containers.
TEST(CudaEncodeTest, LargeBatchesThroughKeptStagingEncodeAsFreshStaging) {
  SKIP_WITHOUT_CUDA();
  constexpr int kPages = 80, kBlocksPerPage = kLargeTokens / 16;
  PageStaging staging;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    DeviceKv kv(KvDType::kBfloat16, KvLayout::kNhd, kPages * kBlocksPerPage, 16, kLargeHeads,
                kLargeChannels / kLargeHeads);
    const std::vector<int32_t> ids = ScatteredIds(kPages * kBlocksPerPage, kPages * kBlocksPerPage, 9 + round);
    for (int p = 0; p < kPages; ++p) {
      kv.Place(Realistic(kLargeTokens, kLargeChannels, 3000 + 100 * round + p), kLargeTokens, ids, p);
    }
    kv.Upload();
    for (const char* name : {"lynx", "lynx-a2r2r4"}) {
      absl::StatusOr<std::vector<EncodedPage>> fresh =
          EncodePagesCuda(MustParse(name), CodecOptions{}, kv.view(), kLargeTokens, ids);
      absl::StatusOr<std::vector<EncodedPage>> kept =
          EncodePagesCudaWith(staging, MustParse(name), CodecOptions{}, kv.view(), kLargeTokens, ids);
      ASSERT_TRUE(fresh.ok() && kept.ok()) << name << ": " << fresh.status() << " / " << kept.status();
      ASSERT_EQ(fresh->size(), kept->size());
      for (size_t p = 0; p < fresh->size(); ++p) {
        EXPECT_EQ((*fresh)[p].bytes, (*kept)[p].bytes) << name << " page " << p;
      }
    }
  }
}

// A NaN in the last page of a large batch is found and named exactly, on both row paths; with an Inf in the page
// before it too, the first of the two (in page order) is the one named, whichever block saw its value first.
TEST(CudaEncodeTest, NonFiniteValuesInLateTilesOfALargeBatchAreRejectedNamingTheFirst) {
  SKIP_WITHOUT_CUDA();
  constexpr int kPages = 80;
  for (const LargeBatch& batch : {kLargeBatches[0], kLargeBatches[1]}) {
    SCOPED_TRACE("block tokens " + std::to_string(batch.block_tokens));
    const int blocks_per_page = (kLargeTokens + batch.block_tokens - 1) / batch.block_tokens;
    DeviceKv kv(batch.dtype, batch.layout, kPages * blocks_per_page, batch.block_tokens, kLargeHeads,
                kLargeChannels / kLargeHeads);
    const std::vector<int32_t> ids = ScatteredIds(kPages * blocks_per_page, kPages * blocks_per_page, 5);
    std::vector<std::vector<float>> pages;
    for (int p = 0; p < kPages; ++p) pages.push_back(Realistic(kLargeTokens, kLargeChannels, 2000 + p));
    // Inside a lane's 8 rows and 8 channels, not at their starts.
    constexpr int kNanPage = kPages - 1, kNanToken = 205, kNanChannel = 1003;
    constexpr int kInfPage = kPages - 2, kInfToken = 99, kInfChannel = 517;
    pages[kNanPage][static_cast<size_t>(kNanToken) * kLargeChannels + kNanChannel] =
        std::numeric_limits<float>::quiet_NaN();
    for (int p = 0; p < kPages; ++p) kv.Place(pages[p], kLargeTokens, ids, p);
    kv.Upload();
    auto expect_named = [&](int page, int token, int channel) {
      absl::StatusOr<std::vector<EncodedPage>> got =
          EncodePagesCuda(MustParse("lynx"), CodecOptions{}, kv.view(), kLargeTokens, ids);
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
      const std::string want = "page " + std::to_string(page) + " value at (token " + std::to_string(token) +
                               ", channel " + std::to_string(channel) + ")";
      EXPECT_NE(std::string(got.status().message()).find(want), std::string::npos)
          << "want \"" << want << "\" in: " << got.status();
    };
    expect_named(kNanPage, kNanToken, kNanChannel);
    pages[kInfPage][static_cast<size_t>(kInfToken) * kLargeChannels + kInfChannel] =
        std::numeric_limits<float>::infinity();
    kv.Place(pages[kInfPage], kLargeTokens, ids, kInfPage);
    kv.Upload();
    expect_named(kInfPage, kInfToken, kInfChannel);
  }
}

TEST(CudaEncodeTest, OddChannelCountsLongPagesAndSmallBlocksMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    // 7 and 40 channels: rows that do not fill 32-bit words; 512 tokens: pages read from global memory twice.
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(64, 7, 6)}, 64, 7, KvDType::kFloat32, KvLayout::kHnd,
                           16, 1);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(96, 40, 7), Realistic(96, 40, 8)}, 96, 40,
                           KvDType::kFloat32, KvLayout::kNhd, 32, 5);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(512, 96, 9)}, 512, 96, KvDType::kBfloat16,
                           KvLayout::kNhd, 16, 3);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(1, 128, 10)}, 1, 128, KvDType::kFloat32,
                           KvLayout::kNhd, 16, 1);
  }
}

TEST(CudaEncodeTest, EveryOptionVariantMatchesTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  for (const char* name : {"lynx", "lynx-a3r5", "int4", "int8"}) {
    for (int chunk : {1, 16, 64, 256}) {
      for (Centering centering : {Centering::kMidrange, Centering::kMean}) {
        for (float alpha : {kMinAlpha, 1.0f, 20.0f, kMaxAlpha}) {
          for (float top_width : {0.0f, kMinTopWidth, CodecOptions{}.top_width, kMaxTopWidth}) {
            if (chunk != 16 && top_width != CodecOptions{}.top_width) continue;  // the knee's range at one chunk
            CodecOptions o;
            o.chunk_tokens = chunk;
            o.centering = centering;
            o.alpha = alpha;
            o.top_width = top_width;
            ExpectEncodeMatchesCpu(name, o, {Realistic(256, 64, chunk)}, 256, 64, KvDType::kFloat32,
                                   KvLayout::kNhd, 256, 2);
          }
        }
      }
    }
  }
}

// The lynx tile encoder (32-token chunks, midrange) on other curves: alpha 1e-3 and 1 take its bucket path with
// other bucket counts, alpha 20 and 1e4 its log-guess path (2048 and 8192 buckets, past the tile table's 1024),
// with and without the knee, on a realistic page (fp32 NHD) and the -0 underflow page in the tile's shape (bf16 HND).
TEST(CudaEncodeTest, LynxTileEncodersOnEveryCurvePathMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  TestPage underflow;
  for (const TestPage& page : AdversarialPages()) {
    if (page.name == "underflow_to_minus_zero") underflow = InTileShape(page);
  }
  ASSERT_FALSE(underflow.data.empty());
  for (const char* name : {"lynx", "lynx8", "lynx4", "lynx-a2r6", "lynx-a2r2r4"}) {
    for (float alpha : {kMinAlpha, 1.0f, 20.0f, kMaxAlpha}) {
      for (float top_width : {0.0f, CodecOptions{}.top_width}) {
        SCOPED_TRACE("alpha " + std::to_string(alpha) + " top width " + std::to_string(top_width));
        CodecOptions o;
        o.alpha = alpha;
        o.top_width = top_width;
        ExpectEncodeMatchesCpu(Tile(name), TileOptions(o), {Realistic(256, 128, 11)}, 256, 128, KvDType::kFloat32, KvLayout::kNhd, 16, 2);
        ExpectEncodeMatchesCpu(Tile(name), TileOptions(o), {underflow.data}, underflow.tokens, underflow.channels, KvDType::kBfloat16,
                               KvLayout::kHnd, 32, underflow.channels / 64);
      }
    }
  }
}

// A page whose chunk-channels hold lone extremes wherever the tile encoder's lanes can hold a sampled one (row 0
// or row 4 of an 8-token slice, either sign, each of a lane's 8 channels), pairs of extremes (no single), and lone
// extremes off the sampled tokens: every path of its single removal, taken. Values in [-1, 1], extremes +-8.
std::vector<float> LoneExtremes(int tokens, int channels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> noise(-1.0f, 1.0f);
  std::vector<float> page(static_cast<size_t>(tokens) * channels);
  for (float& v : page) v = noise(rng);
  for (int k = 0; k < tokens / 32; ++k) {
    for (int c = 0; c < channels; ++c) {
      const int slice = 8 * ((c / 8 + k) % 4), other = 8 * ((c / 8 + k + 1) % 4);
      auto at = [&](int t) -> float& { return page[static_cast<size_t>(32 * k + t) * channels + c]; };
      switch ((c + 3 * k) % 4) {
        case 0:  // lone positive at a slice's row 0, lone negative at another's row 4
          at(slice) = 8.0f, at(other + 4) = -8.0f;
          break;
        case 1:  // the other way round
          at(slice + 4) = 8.0f, at(other) = -8.0f;
          break;
        case 2:  // a pair of positives (no single), a lone negative off the sampled tokens
          at(slice) = 8.0f, at(other + 4) = 8.0f, at(slice + 1) = -8.0f;
          break;
        default:  // none
          break;
      }
    }
  }
  return page;
}

TEST(CudaEncodeTest, AnchorTablesWithAndWithoutTheExactExtremesRuleMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  // With the rule the tables leave out its singles: found inside the tile encoder for lynx (two 4-bit streams),
  // by the separate pass for the other splits and for shapes the tile encoder does not take.
  for (const char* name : {"lynx", "lynx-a3r5", "lynx-a2r2r4"}) {
    for (bool exact : {true, false}) {
      SCOPED_TRACE(std::string("exact_extremes ") + (exact ? "on" : "off"));
      CodecOptions o;
      o.exact_extremes = exact;
      ExpectEncodeMatchesCpu(name, o, {Realistic(256, 1024, 11), Realistic(256, 1024, 12)}, 256, 1024,
                             KvDType::kBfloat16, KvLayout::kNhd, 16, 8);
      ExpectEncodeMatchesCpu(name, o, {Realistic(96, 40, 13)}, 96, 40, KvDType::kFloat32, KvLayout::kHnd, 16, 5);
      ExpectEncodeMatchesCpu(name, o, {LoneExtremes(256, 128, 14), LoneExtremes(256, 128, 15)}, 256, 128,
                             KvDType::kBfloat16, KvLayout::kNhd, 16, 2);
    }
  }
  // The rule does change the tables of such pages (else this test could not fail).
  const std::vector<float> page = Realistic(256, 1024, 11);
  CodecOptions with, without;
  without.exact_extremes = false;
  const absl::StatusOr<EncodedPage> a = EncodePage(MustParse("lynx"), with, PageView{page.data(), 256, 1024, 0});
  const absl::StatusOr<EncodedPage> b = EncodePage(MustParse("lynx"), without, PageView{page.data(), 256, 1024, 0});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->bytes, b->bytes);
  const std::vector<float> lone = LoneExtremes(256, 128, 14);
  const absl::StatusOr<EncodedPage> c = EncodePage(MustParse("lynx"), with, PageView{lone.data(), 256, 128, 0});
  const absl::StatusOr<EncodedPage> d = EncodePage(MustParse("lynx"), without, PageView{lone.data(), 256, 128, 0});
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_NE(c->bytes, d->bytes);
}

// A page whose chunk minima and maxima sit on the grid points of their channel's frame (lynx_math.h ChunkEnd)
// or a float or two beside them: the targets where the tile encoder's window (proven_ends.h) straddles a grid
// point and takes its second evaluation. Channels around zero, one-sided, and offset up to about four times the
// proofs' domain edge (|centre| / half = 1024), past which the lanes bisect; fp32, so the values are stored as
// chosen.
std::vector<float> GridPointChunkEnds(int tokens, int channels, uint64_t seed) {
  namespace cpu = ::kvt::codec::internal;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> grid(1, cpu::kEndGridMax - 1), ulps(-2, 2);
  std::vector<float> page(static_cast<size_t>(tokens) * channels);
  for (int c = 0; c < channels; ++c) {
    const float scale = std::ldexp(1.0f, static_cast<int>(unit(rng) * 40.0f) - 20);
    const float offset = (c % 3 == 0 ? 0.0f : (c % 3 == 1 ? 1.0f : 2048.0f * unit(rng))) * scale;
    const float lo = offset - scale * (0.5f + unit(rng)), hi = offset + scale * (0.5f + unit(rng));
    const cpu::ChannelFrame f = cpu::MakeChannelFrame(lo, hi, cpu::kEndGridMax);
    auto at = [&](int t) -> float& { return page[static_cast<size_t>(t) * channels + c]; };
    auto near_grid = [&]() {
      float v = cpu::ChunkEnd(f, grid(rng));
      for (int n = ulps(rng); n != 0; n += n > 0 ? -1 : 1) v = std::nextafter(v, n > 0 ? hi : lo);
      return std::min(std::max(v, lo), hi);
    };
    for (int k = 0; k < tokens / 32; ++k) {
      float a = near_grid(), b = near_grid();
      if (a > b) std::swap(a, b);
      for (int t = 0; t < 32; ++t) at(32 * k + t) = a + (b - a) * unit(rng) * 0.999f;
      at(32 * k + static_cast<int>(unit(rng) * 31.0f)) = a;
      at(32 * k + 31) = b;
    }
    at(0) = lo;  // the page range: the frame's own ends
    at(tokens - 1) = hi;
  }
  return page;
}

TEST(CudaEncodeTest, ChunkEndsOnAndBesideGridPointsMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  for (const char* name : {"lynx", "lynx8", "lynx4"}) {
    ExpectEncodeMatchesCpu(Tile(name), TileOptions(), {GridPointChunkEnds(256, 128, 21), GridPointChunkEnds(256, 128, 22)},
                           256, 128, KvDType::kFloat32, KvLayout::kNhd, 16, 2);
    ExpectEncodeMatchesCpu(Tile(name), TileOptions(), {GridPointChunkEnds(128, 192, 23)}, 128, 192, KvDType::kFloat32,
                           KvLayout::kHnd, 8, 3);
  }
}

// Version 4's frame spikes on the GPU: pages with sink tokens and outliers (which the spikes take out of the
// frame) on kvtd's page shape and on pages shorter than a chunk (fewer spikes), in every input type and layout,
// other end pair widths and spike counts; and an Inf the selection would have taken as a spike is still named.
TEST(CudaEncodeTest, FrameSpikesAndEveryEndPairWidthMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  auto sinks = [](int tokens, int channels, uint64_t seed) {
    std::vector<float> page = Realistic(tokens, channels, seed);
    for (int c = 0; c < channels; ++c) {
      page[c] = 40.0f + static_cast<float>(c % 7);                                    // a sink token
      if (c % 5 == 0) page[static_cast<size_t>(tokens / 2) * channels + c] = -300.0f;  // an outlier
    }
    return page;
  };
  for (const char* name : {"lynx", "lynx8", "lynx-a2r2r4", "lynx+e23", "lynx+e13+f1", "lynx+f7", "lynx4+e8+f2"}) {
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {sinks(2048, 256, 1), sinks(2048, 256, 2)}, 2048, 256,
                           KvDType::kBfloat16, KvLayout::kNhd, 16, 2);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {sinks(256, 192, 3)}, 256, 192, KvDType::kFloat16, KvLayout::kHnd,
                           32, 3);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {sinks(3, 64, 4)}, 3, 64, KvDType::kFloat32, KvLayout::kNhd, 4, 1);
  }
  // kvtd's page of a Llama-8B layer (2048 tokens x 8 heads x 128) in fp16 HND, and a page of channels that are no
  // whole number of octets (the warp-per-row coder), both staged and selected in the encoder's own blocks.
  ExpectEncodeMatchesCpu("lynx", CodecOptions{}, {sinks(2048, 1024, 6)}, 2048, 1024, KvDType::kFloat16,
                         KvLayout::kHnd, 16, 8);
  ExpectEncodeMatchesCpu("lynx", CodecOptions{}, {sinks(2048, 36, 7), sinks(2048, 36, 8)}, 2048, 36,
                         KvDType::kBfloat16, KvLayout::kNhd, 32, 1);
  // Non-finite values in a long 16-bit page, in both of its blocks: the first in (token, channel) order is named,
  // not the first a block happens to meet. Then, through the same pages, the launch of a clean page clears the
  // status word: its check is OK.
  {
    std::vector<float> long_page = sinks(2048, 64, 9);
    long_page[1800 * 64 + 2] = std::numeric_limits<float>::infinity();
    long_page[1500 * 64 + 40] = std::numeric_limits<float>::quiet_NaN();
    long_page[1500 * 64 + 33] = -std::numeric_limits<float>::infinity();
    long_page[1501 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
    DeviceKv kv(KvDType::kBfloat16, KvLayout::kNhd, 130, 16, 1, 64);
    std::vector<int32_t> ids(128);
    for (int b = 0; b < 128; ++b) ids[b] = (b * 37 + 5) % 130;
    kv.Place(long_page, 2048, ids, 0);
    kv.Upload();
    absl::StatusOr<std::vector<EncodedPage>> got =
        EncodePagesCuda(MustParse("lynx"), CodecOptions{}, kv.view(), 2048, ids);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_NE(std::string(got.status().message()).find("(token 1500, channel 33)"), std::string::npos)
        << got.status();

    absl::StatusOr<std::unique_ptr<DeviceEncodedPages>> pages =
        DeviceEncodedPages::Create(PageLayoutFor(MustParse("lynx"), CodecOptions{}, 2048, 64), 1);
    ASSERT_TRUE(pages.ok()) << pages.status();
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> d_ids = DeviceBuffer::Create(ids.size() * sizeof(int32_t));
    ASSERT_TRUE(d_ids.ok());
    ASSERT_TRUE(CopyToDevice((*d_ids)->get(), ids.data(), ids.size() * sizeof(int32_t)).ok());
    const int32_t* dev_ids = static_cast<const int32_t*>((*d_ids)->get());
    ASSERT_TRUE(EncodePagesCudaAsync(CodecOptions{}, kv.view(), dev_ids, **pages).ok());
    EXPECT_EQ(CheckDeviceStatus(**pages).code(), absl::StatusCode::kInvalidArgument);
    DeviceKv clean(KvDType::kBfloat16, KvLayout::kNhd, 130, 16, 1, 64);
    clean.Place(sinks(2048, 64, 10), 2048, ids, 0);
    clean.Upload();
    ASSERT_TRUE(EncodePagesCudaAsync(CodecOptions{}, clean.view(), dev_ids, **pages).ok());
    EXPECT_TRUE(CheckDeviceStatus(**pages).ok());
  }
  // A NaN where a spike's replacement comes from (token 1: token 0 is the sink, a spike of its chunk) is named
  // where it lies, not at the spike it would have replaced: a staged 16-bit page and an unstaged fp32 one.
  for (const auto& [dtype, tokens] :
       std::vector<std::pair<KvDType, int>>{{KvDType::kBfloat16, 2048}, {KvDType::kFloat32, 512}}) {
    std::vector<float> nan_page = sinks(tokens, 64, 11);
    nan_page[1 * 64 + 9] = std::numeric_limits<float>::quiet_NaN();
    const int blocks = tokens / 16;
    DeviceKv kv(dtype, KvLayout::kNhd, blocks, 16, 1, 64);
    std::vector<int32_t> ids(blocks);
    for (int b = 0; b < blocks; ++b) ids[b] = (b * 7 + 3) % blocks;  // 7 is prime to 32 and 128: a permutation
    kv.Place(nan_page, tokens, ids, 0);
    kv.Upload();
    absl::StatusOr<std::vector<EncodedPage>> got =
        EncodePagesCuda(MustParse("lynx"), CodecOptions{}, kv.view(), tokens, ids);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_NE(std::string(got.status().message()).find("(token 1, channel 9)"), std::string::npos) << got.status();
  }
  std::vector<float> page = sinks(64, 64, 5);
  page[7 * 64 + 2] = std::numeric_limits<float>::infinity();
  DeviceKv kv(KvDType::kFloat32, KvLayout::kNhd, 4, 16, 1, 64);
  const std::vector<int32_t> ids = {2, 0, 3, 1};
  kv.Place(page, 64, ids, 0);
  kv.Upload();
  absl::StatusOr<std::vector<EncodedPage>> got = EncodePagesCuda(MustParse("lynx"), CodecOptions{}, kv.view(), 64, ids);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_NE(std::string(got.status().message()).find("(token 7, channel 2)"), std::string::npos) << got.status();
}

TEST(CudaEncodeTest, NanOrInfInTheInputIsRejectedWithInvalidArgumentNamingIt) {
  SKIP_WITHOUT_CUDA();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (const std::string& name : AllGpuSchemes()) {
      std::vector<float> page = Realistic(64, 64, 11);
      page[5 * 64 + 3] = bad;
      page[9 * 64 + 1] = bad;
      DeviceKv kv(KvDType::kFloat32, KvLayout::kNhd, 4, 16, 1, 64);
      const std::vector<int32_t> ids = {3, 0, 2, 1};
      kv.Place(page, 64, ids, 0);
      kv.Upload();
      absl::StatusOr<std::vector<EncodedPage>> got = EncodePagesCuda(MustParse(name), CodecOptions{}, kv.view(), 64, ids);
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << name << ": " << got.status();
      EXPECT_NE(std::string(got.status().message()).find("(token 5, channel 3)"), std::string::npos) << got.status();
    }
  }
}

// EncodePagesCudaWith (the prefill daemon's path: one staging, pinned, kept across layers) writes the same
// containers as EncodePagesCuda, through a scheme change, a NaN that fails a call, and the layer after it.
TEST(CudaEncodeTest, KeptStagingEncodesAsFreshStagingAcrossLayersSchemesAndFailures) {
  SKIP_WITHOUT_CUDA();
  const std::vector<int32_t> ids = {5, 1, 7, 3, 0, 6, 2, 4};  // two 64-token pages of 4 blocks
  PageStaging staging;
  const std::vector<std::pair<std::string, bool>> steps = {
      {"lynx", false}, {"lynx", false}, {"lynx-a2r2r4", false}, {"lynx-a2r2r4", true}, {"lynx-a2r2r4", false},
      {"int8", false}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [name, nan] = steps[i];
    SCOPED_TRACE("step " + std::to_string(i) + ": " + name + (nan ? " with a NaN" : ""));
    DeviceKv kv(KvDType::kBfloat16, KvLayout::kNhd, 8, 16, 2, 128);
    for (int p = 0; p < 2; ++p) {
      std::vector<float> page = Realistic(64, 256, 60 + 2 * i + p);
      if (nan && p == 1) page[3 * 256 + 9] = std::numeric_limits<float>::quiet_NaN();
      kv.Place(page, 64, ids, p);
    }
    kv.Upload();
    absl::StatusOr<std::vector<EncodedPage>> fresh = EncodePagesCuda(MustParse(name), CodecOptions{}, kv.view(), 64, ids);
    absl::StatusOr<std::vector<EncodedPage>> kept =
        EncodePagesCudaWith(staging, MustParse(name), CodecOptions{}, kv.view(), 64, ids);
    EXPECT_EQ(fresh.status().code(), kept.status().code()) << fresh.status() << " / " << kept.status();
    if (nan) {
      EXPECT_EQ(kept.status().code(), absl::StatusCode::kInvalidArgument) << kept.status();
      EXPECT_EQ(staging.pages, nullptr) << "a failed call must drop the staging";
      continue;
    }
    ASSERT_TRUE(fresh.ok() && kept.ok()) << fresh.status() << " / " << kept.status();
    ASSERT_EQ(fresh->size(), kept->size());
    for (size_t p = 0; p < fresh->size(); ++p) EXPECT_EQ((*fresh)[p].bytes, (*kept)[p].bytes) << "page " << p;
  }
}

// The daemon's encode path: containers copied by strided DMA into kept host containers and sealed there,
// against the plain call's containers, with one HostContainers reused across shapes (it shrinks and grows) and
// the pages sealed by a pool of threads.
TEST(CudaEncodeTest, ContainersEncodedIntoHostContainersAreThoseOfEncodePagesCuda) {
  SKIP_WITHOUT_CUDA();
  PageStaging staging;
  HostContainers out(/*pinned=*/true);
  const PageLoop threads = [](size_t n, const std::function<void(size_t)>& fn) {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < 3; ++t) {
      pool.emplace_back([&, t] {
        for (size_t i = t; i < n; i += 3) fn(i);
      });
    }
    for (std::thread& t : pool) t.join();
  };
  struct Step {
    std::string scheme;
    int pages, tokens, channels;
    bool nan, parallel;
  };
  const std::vector<Step> steps = {{"lynx", 4, 64, 256, false, true},     {"lynx", 2, 128, 256, false, false},
                                   {"lynx-a2r2r4", 5, 64, 256, false, true}, {"lynx", 3, 64, 256, true, true},
                                   {"int8", 2, 32, 40, false, false},      {"bf16", 3, 64, 256, false, true},
                                   {"fp8", 1, 32, 256, false, true}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& st = steps[i];
    SCOPED_TRACE("step " + std::to_string(i) + ": " + st.scheme + (st.nan ? " with a NaN" : ""));
    const int bpp = st.tokens / 16;
    std::vector<int32_t> ids(st.pages * bpp);
    for (size_t b = 0; b < ids.size(); ++b) ids[b] = static_cast<int32_t>((b * 5 + 3) % ids.size());
    const int heads = st.channels % 128 == 0 ? st.channels / 128 : 1;
    DeviceKv kv(KvDType::kBfloat16, KvLayout::kHnd, static_cast<int>(ids.size()), 16, heads, st.channels / heads);
    for (int p = 0; p < st.pages; ++p) {
      std::vector<float> page = Realistic(st.tokens, st.channels, 90 + 7 * i + p);
      if (st.nan && p == st.pages - 1) page[5 * st.channels + 1] = std::numeric_limits<float>::infinity();
      kv.Place(page, st.tokens, ids, p);
    }
    kv.Upload();
    absl::StatusOr<std::vector<EncodedPage>> fresh =
        EncodePagesCuda(MustParse(st.scheme), CodecOptions{}, kv.view(), st.tokens, ids);
    const absl::Status into = EncodePagesCudaInto(staging, out, MustParse(st.scheme), CodecOptions{}, kv.view(),
                                                  st.tokens, ids, {}, st.parallel ? threads : PageLoop());
    EXPECT_EQ(fresh.status().code(), into.code()) << fresh.status() << " / " << into;
    if (st.nan) {
      EXPECT_EQ(into.code(), absl::StatusCode::kInvalidArgument) << into;
      EXPECT_EQ(staging.pages, nullptr) << "a failed call must drop the staging";
      continue;
    }
    ASSERT_TRUE(fresh.ok() && into.ok()) << fresh.status() << " / " << into;
    ASSERT_EQ(out.num_pages(), st.pages);
    for (int p = 0; p < st.pages; ++p) {
      const absl::Span<const uint8_t> c = out.container(p);
      EXPECT_EQ(std::vector<uint8_t>(c.begin(), c.end()), (*fresh)[p].bytes) << "page " << p;
      EXPECT_EQ(out.layout(p).stream_crc, (*fresh)[p].layout.stream_crc) << "page " << p;
    }
  }
}

TEST(CudaEncodeTest, SpikeReservingIsUnimplementedOnTheGpu) {
  SKIP_WITHOUT_CUDA();
  DeviceKv kv(KvDType::kFloat32, KvLayout::kNhd, 1, 32, 1, 32);
  kv.Place(Realistic(32, 32, 12), 32, {0}, 0);
  kv.Upload();
  absl::StatusOr<std::vector<EncodedPage>> got = EncodePagesCuda(MustParse("lynx+spike"), CodecOptions{}, kv.view(), 32, {0});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnimplemented) << got.status();

  std::vector<float> page = Realistic(32, 32, 12);
  absl::StatusOr<EncodedPage> cpu = EncodePage(MustParse("lynx+spike"), CodecOptions{}, PageView{page.data(), 32, 32, 0});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const absl::Span<const uint8_t> one = cpu->bytes;
  EXPECT_EQ(DecodePagesCuda({one}, 1, CodecOptions{}, kv.view(), {0}).code(), absl::StatusCode::kUnimplemented);
}

TEST(CudaEncodeTest, BadArgumentsAreRejectedBeforeAnyLaunch) {
  SKIP_WITHOUT_CUDA();
  DeviceKv kv(KvDType::kFloat32, KvLayout::kNhd, 2, 16, 1, 32);
  const Scheme lynx = MustParse("lynx");
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, kv.view(), 32, {0, 2}).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, kv.view(), 32, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, kv.view(), 24, {0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);  // 24 tokens (two blocks) are not a multiple of the 16-token chunk
  PagedKvView no_data = kv.view();
  no_data.data = nullptr;
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, no_data, 32, {0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}
}  // namespace
}  // namespace kvt::codec::gpu
