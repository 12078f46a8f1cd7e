// The CUDA decode kernels against the CPU decode: paged decodes (NHD/HND x bf16/fp16/fp32, every stage count,
// both anchor rules) rounded to the output dtype, kept staging, GPU-encoded pages, and errors as Status codes.
// Every test skips (GTEST_SKIP) when no CUDA device is present.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "codec/gpu/codec_cuda.h"
#include "codec/gpu/codec_cuda_test_util.h"
#include "common/cuda_util.h"
#include "codec/gpu/host_containers.h"
#include "numerics/float16.h"
#include "codec/test_pages.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu {
namespace {

using namespace ::kvt::codec::gpu::test_util;  // NOLINT: the test helpers


// Decodes CPU containers on the GPU into scattered blocks and compares with the CPU decode rounded to dtype. The
// pages are realistic ones, or all `data` (tokens x channels, token-major) when given.
void ExpectDecodeMatchesCpu(const std::string& scheme_name, int tokens, int channels, int heads, KvDType dtype,
                            KvLayout layout, int block_tokens, AnchorRule rule, int chunk_tokens = 32,
                            int num_pages = 3, const std::vector<float>* data = nullptr) {
  const Scheme scheme = MustParse(scheme_name);
  const int bpp = (tokens + block_tokens - 1) / block_tokens;
  std::vector<EncodedPage> enc;
  for (int p = 0; p < num_pages; ++p) {
    std::vector<float> page = data != nullptr ? *data : Realistic(tokens, channels, 20 + p);
    CodecOptions o;
    o.impl = CodecImpl::kReference;
    o.chunk_tokens = chunk_tokens;
    absl::StatusOr<EncodedPage> e = EncodePage(scheme, o, PageView{page.data(), tokens, channels, 0});
    ASSERT_TRUE(e.ok()) << e.status();
    enc.push_back(std::move(*e));
  }
  std::vector<absl::Span<const uint8_t>> spans;
  for (const EncodedPage& e : enc) spans.push_back(e.bytes);
  const int total_blocks = num_pages * bpp + 2;
  const std::vector<int32_t> ids = ScatteredIds(num_pages * bpp, total_blocks, 99 + tokens);
  for (int run = 0; run < 2 * scheme.num_streams(); ++run) {
    // Every stage count; partial decodes with and without the exact-extremes rule.
    const int stages = run / 2 + 1;
    const bool exact = run % 2 == 0;
    if (!exact && stages == scheme.num_streams()) continue;
    SCOPED_TRACE(scheme_name + " stages " + std::to_string(stages) + (exact ? " exact extremes" : ""));
    DeviceKv kv(dtype, layout, total_blocks, block_tokens, heads, channels / heads);
    CodecOptions o;
    o.anchor_rule = rule;
    o.exact_extremes = exact;
    absl::Status st = DecodePagesCuda(spans, stages, o, kv.view(), ids);
    ASSERT_TRUE(st.ok()) << st;
    kv.Download();
    size_t mismatches = 0;
    for (int p = 0; p < num_pages; ++p) {
      std::vector<float> want(static_cast<size_t>(tokens) * channels);
      o.impl = CodecImpl::kReference;
      ASSERT_TRUE(DecodePage(enc[p].bytes, stages, MutablePageView{want.data(), tokens, channels, 0}, o).ok());
      for (int t = 0; t < tokens; ++t) {
        for (int c = 0; c < channels; ++c) {
          const float w = RoundTo(dtype, want[static_cast<size_t>(t) * channels + c]);
          const float g = kv.At(ids[p * bpp + t / block_tokens], t % block_tokens, c);
          if (!(g == w) && mismatches++ < 5) {
            ADD_FAILURE() << "page " << p << " (token " << t << ", channel " << c << "): gpu " << g << ", cpu " << w;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0u);
    for (int b = 0; b < total_blocks; ++b) {
      if (std::find(ids.begin(), ids.end(), b) == ids.end()) {
        EXPECT_TRUE(kv.Poisoned(b)) << "block " << b;
      }
    }
  }
}

TEST(CudaDecodeTest, EverySchemeAndStageDecodesIntoPagedLayoutsAsTheCpuDecodeRounded) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    for (KvDType dtype : {KvDType::kBfloat16, KvDType::kFloat16, KvDType::kFloat32}) {
      for (KvLayout layout : {KvLayout::kNhd, KvLayout::kHnd}) {
        ExpectDecodeMatchesCpu(name, 256, 512, 4, dtype, layout, 16, AnchorRule::kConditionalMean);
      }
    }
  }
}

TEST(CudaDecodeTest, CodeCentreAnchorsOddShapesAndPartialBlocksDecodeAsTheCpuDecode) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    ExpectDecodeMatchesCpu(name, 64, 256, 2, KvDType::kBfloat16, KvLayout::kNhd, 16, AnchorRule::kCodeCentre);
    ExpectDecodeMatchesCpu(name, 64, 7, 1, KvDType::kFloat16, KvLayout::kHnd, 16, AnchorRule::kValueCentre);
    ExpectDecodeMatchesCpu(name, 20, 40, 5, KvDType::kFloat32, KvLayout::kNhd, 16, AnchorRule::kValueCentre);
    ExpectDecodeMatchesCpu(name, 512, 64, 2, KvDType::kBfloat16, KvLayout::kHnd, 128, AnchorRule::kValueCentre);
    ExpectDecodeMatchesCpu(name, 64, 7, 1, KvDType::kFloat16, KvLayout::kHnd, 16, AnchorRule::kConditionalMean);
    ExpectDecodeMatchesCpu(name, 20, 40, 5, KvDType::kFloat32, KvLayout::kNhd, 16, AnchorRule::kConditionalMean);
  }
}

// The adversarial pages (codec/test_pages.h: +-0, denormals, 1e4 outliers, +-3e38, +-FLT_MAX, constant channels, a
// tiny range around a large offset, ...) repeated into the lynx tile decoder's shape and decoded into bf16 and fp16:
// the 16-bit outputs clamp after rounding (ClampPair), which must equal rounding the clamped float, fp16's
// overflow to infinity included; fp32 for the float clamp. Every stage, with and without the exact-extremes rule.
TEST(CudaDecodeTest, AdversarialPagesInTheTileDecodersShapeDecodeAsTheCpuDecodeRounded) {
  SKIP_WITHOUT_CUDA();
  for (const TestPage& page : AdversarialPages()) {
    SCOPED_TRACE(page.name);
    const TestPage tiled = InTileShape(page);
    for (const char* name : {"lynx", "lynx8", "lynx4", "lynx-a2r6", "lynx-a2r2r4"}) {
      for (KvDType dtype : {KvDType::kBfloat16, KvDType::kFloat16, KvDType::kFloat32}) {
        const KvLayout layout = dtype == KvDType::kFloat16 ? KvLayout::kHnd : KvLayout::kNhd;
        ExpectDecodeMatchesCpu(name, tiled.tokens, tiled.channels, tiled.channels / 64, dtype, layout, 16,
                               AnchorRule::kConditionalMean, 32, 2, &tiled.data);
      }
    }
  }
}

// A batch of 160 pages of 512 channels is 1280 tiles, more than an H100 or H200 holds at once (4 blocks on each of
// 132 SMs): later blocks reuse the slots, and pages far apart in the batch must still decode as the CPU does.
TEST(CudaDecodeTest, LargeBatchesOfMoreTilesThanResidentBlocksMatchTheCpuDecode) {
  SKIP_WITHOUT_CUDA();
  for (const std::string name : {"lynx", "lynx4", "lynx-a2r6"}) {
    ExpectDecodeMatchesCpu(name, 256, 512, 4, KvDType::kBfloat16, KvLayout::kNhd, 16, AnchorRule::kConditionalMean,
                           32, 160);
  }
}

// The tile decoder counts a chunk's top cells within its 128-token tile: chunks that straddle tiles (48 tokens;
// 256; a 200-token page shorter than its 256-token chunk) must still get the rule over the whole chunk.
TEST(CudaDecodeTest, ExactExtremesHoldForChunksThatStraddleDecodeTiles) {
  SKIP_WITHOUT_CUDA();
  for (const std::string name : {"lynx", "lynx-a2r2r4"}) {
    ExpectDecodeMatchesCpu(name, 384, 256, 2, KvDType::kBfloat16, KvLayout::kNhd, 16, AnchorRule::kConditionalMean,
                           48);
    ExpectDecodeMatchesCpu(name, 512, 256, 2, KvDType::kBfloat16, KvLayout::kHnd, 16, AnchorRule::kConditionalMean,
                           256);
    ExpectDecodeMatchesCpu(name, 200, 128, 1, KvDType::kFloat16, KvLayout::kNhd, 8, AnchorRule::kConditionalMean,
                           256);
    ExpectDecodeMatchesCpu(name, 256, 256, 2, KvDType::kBfloat16, KvLayout::kNhd, 16, AnchorRule::kConditionalMean,
                           128);
    ExpectDecodeMatchesCpu(name, 256, 256, 2, KvDType::kBfloat16, KvLayout::kNhd, 16, AnchorRule::kConditionalMean,
                           16);
  }
}

// kvtd's page of a Llama-8B layer (2048 tokens x 8 heads x 128, lynx's own 16-token chunks): the frame spikes lie
// in many of the page's 16 tiles, each written by the block of its tile after that block's own stores. Every stage
// count, with and without the exact-extremes rule (which the tile kernel applies itself at this chunk length).
TEST(CudaDecodeTest, KvtdsPageShapeDecodesWithItsFrameSpikesAsTheCpuDecode) {
  SKIP_WITHOUT_CUDA();
  ExpectDecodeMatchesCpu("lynx", 2048, 1024, 8, KvDType::kBfloat16, KvLayout::kNhd, 16, AnchorRule::kConditionalMean,
                         16, 2);
  ExpectDecodeMatchesCpu("lynx", 2048, 1024, 8, KvDType::kFloat16, KvLayout::kHnd, 16, AnchorRule::kConditionalMean,
                         16, 1);
}

// DecodePagesCudaWith (the daemon's page-at-a-time path) keeps its staging while the layout and page count stay,
// replaces it when they change, drops it after a failed call, and decodes exactly as DecodePagesCuda does.
TEST(CudaDecodeTest, KeptStagingDecodesAsFreshStagingAcrossSchemesShapesAndFailures) {
  SKIP_WITHOUT_CUDA();
  struct Step {
    std::string scheme;
    int tokens, channels, pages, stages;
    bool corrupt;
    const char* staging;  // whether the staging fits the step before it runs ("kept") or not ("new")
  };
  const std::vector<Step> steps = {
      {"lynx", 256, 512, 1, 1, false, "new"},         {"lynx", 256, 512, 1, 2, false, "kept"},
      {"lynx", 256, 512, 1, 1, true, "kept"},         {"lynx", 256, 512, 1, 1, false, "new"},
      {"int8", 128, 256, 1, 1, false, "new"},         {"lynx-a2r2r4", 256, 512, 1, 2, false, "new"},
      {"lynx-a2r2r4", 256, 512, 1, 3, false, "kept"}, {"lynx", 256, 512, 3, 2, false, "new"},
      // Batches of varying size share the largest one's memory (the daemon decodes what has arrived).
      {"lynx", 256, 512, 1, 1, false, "kept"},        {"lynx", 256, 512, 2, 2, false, "kept"},
      {"lynx", 256, 512, 3, 1, false, "kept"},        {"lynx", 256, 512, 4, 2, false, "new"},
  };
  PageStaging staging;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    SCOPED_TRACE("step " + std::to_string(i) + ": " + step.scheme + " stages " + std::to_string(step.stages));
    std::vector<EncodedPage> enc;
    for (int p = 0; p < step.pages; ++p) {
      std::vector<float> page = Realistic(step.tokens, step.channels, 40 + 7 * i + p);
      CodecOptions o;
      o.impl = CodecImpl::kReference;
      absl::StatusOr<EncodedPage> e = EncodePage(MustParse(step.scheme), o, PageView{page.data(), step.tokens,
                                                                                     step.channels, 0});
      ASSERT_TRUE(e.ok()) << e.status();
      enc.push_back(std::move(*e));
    }
    if (step.corrupt) enc[0].bytes[200] ^= 0x10;  // stream 0's metadata: its CRC no longer matches
    std::vector<absl::Span<const uint8_t>> spans;
    for (const EncodedPage& e : enc) spans.push_back(e.bytes);
    const int heads = step.channels / 128;
    const int bpp = step.tokens / 16;
    const std::vector<int32_t> ids = ScatteredIds(step.pages * bpp, step.pages * bpp + 3, 7 + i);
    DeviceKv fresh(KvDType::kBfloat16, KvLayout::kNhd, step.pages * bpp + 3, 16, heads, 128);
    DeviceKv kept(KvDType::kBfloat16, KvLayout::kNhd, step.pages * bpp + 3, 16, heads, 128);
    absl::StatusOr<ContainerLayout> layout = ParseContainerHeader(enc[0].bytes);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(staging.FitsUpTo(*layout, step.pages), std::string(step.staging) == "kept");
    const absl::Status a = DecodePagesCuda(spans, step.stages, CodecOptions{}, fresh.view(), ids);
    const absl::Status b = DecodePagesCudaWith(staging, spans, step.stages, CodecOptions{}, kept.view(), ids);
    EXPECT_EQ(a.code(), b.code()) << a << " / " << b;
    if (step.corrupt) {
      EXPECT_EQ(b.code(), absl::StatusCode::kDataLoss) << b;
      EXPECT_EQ(staging.pages, nullptr) << "a failed call must drop the staging";
      continue;
    }
    EXPECT_TRUE(staging.FitsUpTo(*layout, step.pages));
    EXPECT_EQ(staging.pages->num_pages(), step.pages);
    ASSERT_TRUE(b.ok()) << b;
    fresh.Download();
    kept.Download();
    size_t mismatches = 0;
    for (int blk = 0; blk < step.pages * bpp + 3; ++blk) {
      for (int row = 0; row < 16; ++row) {
        for (int c = 0; c < step.channels; ++c) {
          const float x = fresh.At(blk, row, c), y = kept.At(blk, row, c);
          if (!(x == y || (std::isnan(x) && std::isnan(y))) && mismatches++ < 5) {
            ADD_FAILURE() << "block " << blk << " row " << row << " channel " << c << ": " << x << " vs " << y;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }
}

// The daemon's inbox path: containers laid back to back in one (pinned) buffer, in runs with gaps between them,
// uploaded straight from there by strided DMA, decode exactly as the copying path does; a corrupt one fails the
// batch with DATA_LOSS before anything is launched.
TEST(CudaDecodeTest, ContainersUploadedStraightFromTheirMemoryDecodeAsTheCopyingPath) {
  SKIP_WITHOUT_CUDA();
  for (const std::string name : {"lynx", "int8", "lynx-a2r2r4", "bf16"}) {
    const Scheme scheme = MustParse(name);
    for (int stages = 1; stages <= scheme.num_streams(); ++stages) {
      SCOPED_TRACE(name + " stages " + std::to_string(stages));
      const int tokens = 256, channels = 512, pages = 7;
      std::vector<EncodedPage> enc;
      for (int p = 0; p < pages; ++p) {
        std::vector<float> page = Realistic(tokens, channels, 300 + p);
        absl::StatusOr<EncodedPage> e = EncodePage(scheme, CodecOptions{}, PageView{page.data(), tokens, channels, 0});
        ASSERT_TRUE(e.ok()) << e.status();
        enc.push_back(std::move(*e));
      }
      // Pages 0-2 back to back, a gap, 3-5 back to back, a gap, page 6.
      const size_t bytes = enc[0].bytes.size();
      absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> memory = PinnedHostBuffer::Create(pages * bytes + 2 * 4096);
      ASSERT_TRUE(memory.ok()) << memory.status();
      std::vector<absl::Span<const uint8_t>> direct, copies;
      size_t at = 0;
      for (int p = 0; p < pages; ++p) {
        if (p == 3 || p == 6) at += 4096;
        std::memcpy((*memory)->data() + at, enc[p].bytes.data(), bytes);
        direct.emplace_back((*memory)->data() + at, bytes);
        copies.push_back(enc[p].bytes);
        at += bytes;
      }
      const int bpp = tokens / 16;
      const std::vector<int32_t> ids = ScatteredIds(pages * bpp, pages * bpp + 5, 11);
      DeviceKv a(KvDType::kBfloat16, KvLayout::kHnd, pages * bpp + 5, 16, channels / 128, 128);
      DeviceKv b(KvDType::kBfloat16, KvLayout::kHnd, pages * bpp + 5, 16, channels / 128, 128);
      PageStaging sa, sb;
      ASSERT_TRUE(DecodePagesCudaWith(sa, copies, stages, CodecOptions{}, a.view(), ids).ok());
      std::atomic<int> checked{0};
      const PageLoop loop = [&checked](size_t n, const std::function<void(size_t)>& fn) {
        for (size_t i = n; i-- > 0;) {  // any order: the checks are independent
          fn(i);
          ++checked;
        }
      };
      const absl::Status s = DecodeHostContainersCudaWith(sb, direct, stages, CodecOptions{}, b.view(), ids, {}, loop);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(checked.load(), pages);
      a.Download();
      b.Download();
      for (int blk = 0; blk < pages * bpp + 5; ++blk) {
        for (int row = 0; row < 16; ++row) {
          for (int c = 0; c < channels; c += 7) {
            const float x = a.At(blk, row, c), y = b.At(blk, row, c);
            ASSERT_TRUE(x == y || (std::isnan(x) && std::isnan(y))) << blk << " " << row << " " << c;
          }
        }
      }
      // A flipped byte in page 4's stream 0 (after its header): DATA_LOSS, the staging dropped.
      uint8_t* page4 = const_cast<uint8_t*>(direct[4].data());
      page4[enc[4].layout.header_bytes + 3] ^= 0x40;
      EXPECT_EQ(DecodeHostContainersCudaWith(sb, direct, stages, CodecOptions{}, b.view(), ids).code(),
                absl::StatusCode::kDataLoss);
      EXPECT_EQ(sb.pages, nullptr);
    }
  }
}

TEST(CudaDecodeTest, AnEncodeAfterASmallerDecodeInTheSameStagingLaysOutItsWholeBatch) {
  SKIP_WITHOUT_CUDA();
  const Scheme lynx = MustParse("lynx");
  DeviceKv src(KvDType::kBfloat16, KvLayout::kNhd, 32, 16, 4, 128);
  const std::vector<int32_t> ids = ReversedIds(32);
  src.Place(Realistic(256, 512, 50), 256, ids, 0);
  src.Place(Realistic(256, 512, 51), 256, ids, 1);
  src.Upload();
  absl::StatusOr<std::vector<EncodedPage>> want = EncodePagesCuda(lynx, CodecOptions{}, src.view(), 256, ids);
  ASSERT_TRUE(want.ok()) << want.status();
  PageStaging staging;
  absl::StatusOr<std::vector<EncodedPage>> first = EncodePagesCudaWith(staging, lynx, CodecOptions{}, src.view(), 256, ids);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(staging.pages->capacity(), 2);
  // One page decoded through the same staging lays out a batch of one in its memory.
  DeviceKv dst(KvDType::kBfloat16, KvLayout::kNhd, 32, 16, 4, 128);
  const absl::Span<const uint8_t> one[] = {(*want)[0].bytes};
  const std::vector<int32_t> one_ids(ids.begin(), ids.begin() + 16);
  const absl::Status decoded = DecodePagesCudaWith(staging, one, 2, CodecOptions{}, dst.view(), one_ids);
  ASSERT_TRUE(decoded.ok()) << decoded;
  EXPECT_EQ(staging.pages->num_pages(), 1);
  EXPECT_EQ(staging.pages->capacity(), 2);
  // The next encode of two pages must lay out two again, not write the second page past the first's layout.
  absl::StatusOr<std::vector<EncodedPage>> again = EncodePagesCudaWith(staging, lynx, CodecOptions{}, src.view(), 256, ids);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 2u);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ((*first)[p].bytes, (*want)[p].bytes) << "page " << p;
    EXPECT_EQ((*again)[p].bytes, (*want)[p].bytes) << "page " << p;
  }
  EXPECT_EQ(staging.pages->SetNumPages(3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(staging.pages->SetNumPages(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaDecodeTest, GpuEncodedPagesDecodeOnTheGpuWithoutLeavingTheDevice) {
  SKIP_WITHOUT_CUDA();
  const Scheme lynx = MustParse("lynx");
  DeviceKv src(KvDType::kBfloat16, KvLayout::kNhd, 32, 16, 8, 128);
  const std::vector<int32_t> ids = ReversedIds(32);
  std::vector<float> a = src.Place(Realistic(256, 1024, 30), 256, ids, 0);
  std::vector<float> b = src.Place(Realistic(256, 1024, 31), 256, ids, 1);
  src.Upload();
  ContainerLayout shape;
  shape.scheme = lynx;
  shape.tokens = 256;
  shape.channels = 1024;
  shape.chunk_tokens = ResolveChunkTokens(lynx, CodecOptions{}.chunk_tokens);  // what the options give
  shape.alpha = CodecOptions{}.alpha;
  shape.top_width = CodecOptions{}.top_width;
  absl::StatusOr<std::unique_ptr<DeviceEncodedPages>> pages = DeviceEncodedPages::Create(shape, 2);
  ASSERT_TRUE(pages.ok()) << pages.status();
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> d_ids = DeviceBuffer::Create(ids.size() * 4);
  ASSERT_TRUE(d_ids.ok());
  ASSERT_TRUE(CopyToDevice((*d_ids)->get(), ids.data(), ids.size() * 4).ok());
  const int32_t* dev_ids = static_cast<const int32_t*>((*d_ids)->get());
  const absl::Status encoded = EncodePagesCudaAsync(CodecOptions{}, src.view(), dev_ids, **pages);
  ASSERT_TRUE(encoded.ok()) << encoded;
  ASSERT_TRUE(CheckDeviceStatus(**pages).ok());  // before the decode's launch clears the status word
  // A batch shaped for another curve is refused, not encoded with the wrong tables.
  CodecOptions plain;
  plain.top_width = 0.0f;
  EXPECT_EQ(EncodePagesCudaAsync(plain, src.view(), dev_ids, **pages).code(), absl::StatusCode::kInvalidArgument);
  DeviceKv dst(KvDType::kBfloat16, KvLayout::kHnd, 32, 16, 8, 128);
  CodecOptions decode_options;
  decode_options.anchor_rule = AnchorRule::kValueCentre;
  ASSERT_TRUE(DecodePagesCudaAsync(**pages, 2, decode_options, dst.view(), dev_ids).ok());
  ASSERT_TRUE(CheckDeviceStatus(**pages).ok());
  dst.Download();
  absl::StatusOr<std::vector<EncodedPage>> containers = (*pages)->ToContainers();
  ASSERT_TRUE(containers.ok());
  for (int p = 0; p < 2; ++p) {
    std::vector<float> want(256 * 1024);
    ASSERT_TRUE(DecodePage((*containers)[p].bytes, 2, MutablePageView{want.data(), 256, 1024, 0}).ok());
    size_t mismatches = 0;
    for (int t = 0; t < 256; ++t) {
      for (int c = 0; c < 1024; ++c) {
        mismatches += dst.At(ids[p * 16 + t / 16], t % 16, c) != RoundTo(KvDType::kBfloat16, want[t * 1024 + c]);
      }
    }
    EXPECT_EQ(mismatches, 0u) << "page " << p;
  }
}

TEST(CudaDecodeTest, CorruptContainersAndBadArgumentsGiveTheirStatusCodes) {
  SKIP_WITHOUT_CUDA();
  std::vector<float> page = Realistic(32, 64, 40);
  absl::StatusOr<EncodedPage> enc = EncodePage(MustParse("lynx"), CodecOptions{}, PageView{page.data(), 32, 64, 0});
  ASSERT_TRUE(enc.ok());
  DeviceKv kv(KvDType::kBfloat16, KvLayout::kNhd, 2, 32, 1, 64);
  const absl::Span<const uint8_t> good = enc->bytes;
  EXPECT_TRUE(DecodePagesCuda({good}, 2, CodecOptions{}, kv.view(), {1}).ok());
  EXPECT_EQ(DecodePagesCuda({good}, 0, CodecOptions{}, kv.view(), {1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePagesCuda({good}, 3, CodecOptions{}, kv.view(), {1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePagesCuda({good}, 2, CodecOptions{}, kv.view(), {2}).code(), absl::StatusCode::kOutOfRange);

  std::vector<uint8_t> flipped = enc->bytes;
  flipped[enc->layout.stream_offset[1] + 5] ^= 0x10;  // residual byte: CRC mismatch, anchor-only still decodes
  EXPECT_EQ(DecodePagesCuda({absl::MakeConstSpan(flipped)}, 2, CodecOptions{}, kv.view(), {0}).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(DecodePagesCuda({absl::MakeConstSpan(flipped)}, 1, CodecOptions{}, kv.view(), {0}).ok());

  // lo > hi for channel 0 with a valid CRC: metadata no encoder writes.
  std::vector<uint8_t> bad_range = enc->bytes;
  const size_t meta = enc->layout.header_bytes;
  const float lo = 5.0f, hi = -5.0f;
  std::memcpy(&bad_range[meta], &lo, 4);
  std::memcpy(&bad_range[meta + 4 * 64], &hi, 4);
  const uint32_t crc = Crc32c(&bad_range[meta], enc->layout.stream_length[0] - meta);
  ContainerLayout l = enc->layout;
  l.stream_crc[0] = crc;
  WriteContainerHeader(l, bad_range.data());
  EXPECT_EQ(DecodePagesCuda({absl::MakeConstSpan(bad_range)}, 1, CodecOptions{}, kv.view(), {0}).code(),
            absl::StatusCode::kDataLoss);
  // The batch's status word was cleared: the next good decode is OK.
  EXPECT_TRUE(DecodePagesCuda({good}, 1, CodecOptions{}, kv.view(), {0}).ok());

  // An end pair index past the grid (chunk 0, channel 0), an anchor table entry above 1 and frame spikes no encoder
  // writes, each resealed. The 32 x 64 page's metadata: lo, hi; 14-bit end pairs of 2 chunks x 64 channels (224
  // bytes); 3 frame spikes per channel, f32 values then u16 tokens; the anchor table.
  auto resealed = [&](auto edit) {
    std::vector<uint8_t> b = enc->bytes;
    edit(b.data() + meta);
    ContainerLayout rl = enc->layout;
    rl.stream_crc[0] = Crc32c(&b[meta], enc->layout.stream_length[0] - meta);
    WriteContainerHeader(rl, b.data());
    return b;
  };
  const std::vector<uint8_t> bad_ends = resealed([](uint8_t* p) { p[8 * 64] = 0xFF; p[8 * 64 + 1] |= 0x3F; });
  EXPECT_EQ(DecodePagesCuda({absl::MakeConstSpan(bad_ends)}, 1, CodecOptions{}, kv.view(), {0}).code(),
            absl::StatusCode::kDataLoss);
  const size_t spike_values = 8 * 64 + 2 * 64 * 14 / 8, spike_tokens = spike_values + 4 * 3 * 64;
  const size_t tables = spike_tokens + 2 * 3 * 64;
  const std::vector<uint8_t> bad_table = resealed([&](uint8_t* p) {
    const float big = 1.5f;
    std::memcpy(p + tables, &big, 4);
  });
  EXPECT_EQ(DecodePagesCuda({absl::MakeConstSpan(bad_table)}, 1, CodecOptions{}, kv.view(), {0}).code(),
            absl::StatusCode::kDataLoss);
  const std::vector<uint8_t> spike_past_page = resealed([&](uint8_t* p) { p[spike_tokens] = 32, p[spike_tokens + 1] = 0; });
  const std::vector<uint8_t> spike_repeated = resealed([&](uint8_t* p) {
    std::memcpy(p + spike_tokens + 2 * 64, p + spike_tokens, 2);  // channel 0's second spike = its first
  });
  const std::vector<uint8_t> spike_nan = resealed([&](uint8_t* p) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(p + spike_values + 4 * 9, &nan, 4);
  });
  for (const auto* bad : {&spike_past_page, &spike_repeated, &spike_nan}) {
    for (int stages : {1, 2}) {
      const absl::Status st = DecodePagesCuda({absl::MakeConstSpan(*bad)}, stages, CodecOptions{}, kv.view(), {0});
      EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
      // The CPU decoder refuses the same bytes.
      std::vector<float> out(32 * 64);
      EXPECT_EQ(DecodePage(*bad, stages, MutablePageView{out.data(), 32, 64, 0}).code(), absl::StatusCode::kDataLoss);
    }
  }
  EXPECT_TRUE(DecodePagesCuda({good}, 2, CodecOptions{}, kv.view(), {0}).ok());
}

}  // namespace
}  // namespace kvt::codec::gpu
