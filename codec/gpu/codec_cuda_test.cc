// The CUDA kernels against the CPU reference: container bytes of every scheme on random and adversarial pages,
// read from NHD/HND paged layouts through scattered block ids; paged decodes against the CPU decode rounded to
// the output dtype; errors as Status codes. Every test skips (GTEST_SKIP) when no CUDA device is present.
#include "codec/gpu/codec_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "codec/gpu/cuda_util.h"
#include "codec/gpu/host_containers.h"
#include "codec/internal/float_formats.h"
#include "codec/test_pages.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu {
namespace {

namespace ff = ::kvt::codec::internal;

#define SKIP_WITHOUT_CUDA()                                                             \
  do {                                                                                  \
    absl::StatusOr<int> n = CudaDeviceCount();                                          \
    if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();                      \
    if (*n == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned 0";       \
  } while (0)

const std::vector<std::string>& AllGpuSchemes() {
  static const auto* names = new std::vector<std::string>{
      "bf16", "int8", "int4", "fp8", "lynx", "lynx-a2r6", "lynx-a3r5", "lynx-a4r4", "lynx-a2r2r4", "lynx8", "lynx4",
      "lynx-a1r3r4", "lynx-a3r2r3"};
  return *names;
}

Scheme MustParse(const std::string& name) {
  absl::StatusOr<Scheme> s = ParseScheme(name);
  EXPECT_TRUE(s.ok()) << name << ": " << s.status();
  return *s;
}

// What the GPU stores for an input float of `dtype` (the value the CPU reference must see).
uint16_t Bf16Rne(float x) {
  const uint32_t b = ff::FloatBits(x);
  return static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}
uint16_t F16Rne(float x) {
  if (std::fabs(x) >= 65520.0f) return static_cast<uint16_t>((std::signbit(x) ? 0x8000 : 0) | 0x7C00);
  return ff::FloatToF16(x, ff::F16Round::kNearestEven);
}
float RoundTo(KvDType dtype, float x) {
  switch (dtype) {
    case KvDType::kFloat32:
      return x;
    case KvDType::kBfloat16:
      return ff::Bf16ToFloat(Bf16Rne(x));
    case KvDType::kFloat16:
      return ff::F16ToFloat(F16Rne(x));
  }
  return x;
}

// A paged KV cache in device memory, mirrored on the host, with pages placed at given block ids.
class DeviceKv {
 public:
  DeviceKv(KvDType dtype, KvLayout layout, int num_blocks, int block_tokens, int heads, int head_dim)
      : view_{nullptr, dtype, layout, num_blocks, block_tokens, heads, head_dim} {
    host_.assign(view_.bytes(), 0xA5);  // poison: decodes must overwrite exactly their blocks
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> b = DeviceBuffer::Create(host_.size());
    EXPECT_TRUE(b.ok()) << b.status();
    buf_ = std::move(*b);
    view_.data = buf_->get();
    EXPECT_TRUE(CopyToDevice(buf_->get(), host_.data(), host_.size()).ok());
  }
  const PagedKvView& view() const { return view_; }

  size_t Index(int block, int row, int c) const {
    const int h = c / view_.head_dim, d = c % view_.head_dim;
    if (view_.layout == KvLayout::kNHD) {
      return ((static_cast<size_t>(block) * view_.block_tokens + row) * view_.heads + h) * view_.head_dim + d;
    }
    return ((static_cast<size_t>(block) * view_.heads + h) * view_.block_tokens + row) * view_.head_dim + d;
  }
  // Writes page `p` of `tokens` tokens (token-major floats) into its blocks; returns the values as stored.
  std::vector<float> Place(const std::vector<float>& values, int tokens, const std::vector<int32_t>& ids, int p) {
    const int bpp = BlocksPerPage(view_, tokens);
    const int channels = view_.channels();
    std::vector<float> stored(values.size());
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < channels; ++c) {
        const float x = values[static_cast<size_t>(t) * channels + c];
        const size_t i = Index(ids[p * bpp + t / view_.block_tokens], t % view_.block_tokens, c);
        stored[static_cast<size_t>(t) * channels + c] = RoundTo(view_.dtype, x);
        switch (view_.dtype) {
          case KvDType::kFloat32:
            std::memcpy(&host_[4 * i], &x, 4);
            break;
          case KvDType::kBfloat16: {
            const uint16_t b = Bf16Rne(x);
            std::memcpy(&host_[2 * i], &b, 2);
            break;
          }
          case KvDType::kFloat16: {
            const uint16_t h = F16Rne(x);
            std::memcpy(&host_[2 * i], &h, 2);
            break;
          }
        }
      }
    }
    return stored;
  }
  void Upload() { ASSERT_TRUE(CopyToDevice(buf_->get(), host_.data(), host_.size()).ok()); }
  void Download() { ASSERT_TRUE(CopyToHost(host_.data(), buf_->get(), host_.size()).ok()); ASSERT_TRUE(Synchronize().ok()); }
  // Value at (block, row, channel) of the host mirror, as a float.
  float At(int block, int row, int c) const {
    const size_t i = Index(block, row, c);
    switch (view_.dtype) {
      case KvDType::kFloat32: {
        float x;
        std::memcpy(&x, &host_[4 * i], 4);
        return x;
      }
      case KvDType::kBfloat16: {
        uint16_t b;
        std::memcpy(&b, &host_[2 * i], 2);
        return ff::Bf16ToFloat(b);
      }
      case KvDType::kFloat16: {
        uint16_t h;
        std::memcpy(&h, &host_[2 * i], 2);
        return ff::F16ToFloat(h);
      }
    }
    return 0;
  }
  bool Poisoned(int block) const {
    const size_t per_block = view_.bytes() / view_.num_blocks;
    for (size_t i = 0; i < per_block; ++i) {
      if (host_[block * per_block + i] != 0xA5) return false;
    }
    return true;
  }

 private:
  PagedKvView view_;
  std::vector<uint8_t> host_;
  std::unique_ptr<DeviceBuffer> buf_;
};

// Scattered block ids: a shuffled choice of `needed` out of `total` blocks.
std::vector<int32_t> ScatteredIds(int needed, int total, uint32_t seed) {
  std::vector<int32_t> all(total);
  for (int i = 0; i < total; ++i) all[i] = i;
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(needed);
  return all;
}

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

std::vector<float> Realistic(int tokens, int channels, uint64_t seed) {
  return RealisticPage(tokens, channels, seed).data;
}

TEST(CudaEncodeTest, EveryFullSizeSchemeMatchesTheCpuReferenceByteForByte) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(256, 1024, 1), Realistic(256, 1024, 2)}, 256, 1024,
                           KvDType::kFloat32, KvLayout::kNHD, 16, 8);
  }
}

TEST(CudaEncodeTest, Bf16AndFp16InputsInHndLayoutMatchTheCpuReferenceOfTheStoredValues) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(256, 512, 3), Realistic(256, 512, 4)}, 256, 512,
                           KvDType::kBfloat16, KvLayout::kHND, 32, 4);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(64, 256, 5)}, 64, 256, KvDType::kFloat16,
                           KvLayout::kNHD, 16, 2);
  }
}

TEST(CudaEncodeTest, AdversarialPagesMatchTheCpuReferenceByteForByte) {
  SKIP_WITHOUT_CUDA();
  for (const TestPage& page : AdversarialPages()) {
    SCOPED_TRACE(page.name);
    for (const std::string& name : AllGpuSchemes()) {
      ExpectEncodeMatchesCpu(name, CodecOptions{}, {page.data}, page.tokens, page.channels, KvDType::kFloat32,
                             KvLayout::kNHD, page.tokens, 1);
    }
  }
}

TEST(CudaEncodeTest, AdversarialPagesInTheLynxTileEncodersShapeMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  // Each adversarial page repeated over whole 32-token chunks and a multiple of 64 channels (the shape the lynx
  // tile encoder takes), fp32 NHD and bf16 HND.
  for (const TestPage& page : AdversarialPages()) {
    SCOPED_TRACE(page.name);
    const int tokens = std::min(256, (page.tokens + 31) / 32 * 32);
    const int channels = (page.channels + 63) / 64 * 64;
    std::vector<float> tiled(static_cast<size_t>(tokens) * channels);
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < channels; ++c) {
        tiled[static_cast<size_t>(t) * channels + c] =
            page.data[static_cast<size_t>(t % page.tokens) * page.channels + c % page.channels];
      }
    }
    for (const char* name : {"lynx", "lynx8", "lynx4", "lynx-a2r6", "lynx-a2r2r4"}) {
      ExpectEncodeMatchesCpu(name, CodecOptions{}, {tiled}, tokens, channels, KvDType::kFloat32, KvLayout::kNHD, 16,
                             channels / 64);
      ExpectEncodeMatchesCpu(name, CodecOptions{}, {tiled, tiled}, tokens, channels, KvDType::kBfloat16,
                             KvLayout::kHND, 32, channels / 64);
    }
  }
}

TEST(CudaEncodeTest, OddChannelCountsLongPagesAndSmallBlocksMatchTheCpuReference) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    // 7 and 40 channels: rows that do not fill 32-bit words; 512 tokens: pages read from global memory twice.
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(64, 7, 6)}, 64, 7, KvDType::kFloat32, KvLayout::kHND,
                           16, 1);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(96, 40, 7), Realistic(96, 40, 8)}, 96, 40,
                           KvDType::kFloat32, KvLayout::kNHD, 32, 5);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(512, 96, 9)}, 512, 96, KvDType::kBfloat16,
                           KvLayout::kNHD, 16, 3);
    ExpectEncodeMatchesCpu(name, CodecOptions{}, {Realistic(1, 128, 10)}, 1, 128, KvDType::kFloat32,
                           KvLayout::kNHD, 16, 1);
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
                                   KvLayout::kNHD, 256, 2);
          }
        }
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
                             KvDType::kBfloat16, KvLayout::kNHD, 16, 8);
      ExpectEncodeMatchesCpu(name, o, {Realistic(96, 40, 13)}, 96, 40, KvDType::kFloat32, KvLayout::kHND, 16, 5);
      ExpectEncodeMatchesCpu(name, o, {LoneExtremes(256, 128, 14), LoneExtremes(256, 128, 15)}, 256, 128,
                             KvDType::kBfloat16, KvLayout::kNHD, 16, 2);
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

TEST(CudaEncodeTest, NanOrInfInTheInputIsRejectedWithInvalidArgumentNamingIt) {
  SKIP_WITHOUT_CUDA();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (const std::string& name : AllGpuSchemes()) {
      std::vector<float> page = Realistic(64, 64, 11);
      page[5 * 64 + 3] = bad;
      page[9 * 64 + 1] = bad;
      DeviceKv kv(KvDType::kFloat32, KvLayout::kNHD, 4, 16, 1, 64);
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
    DeviceKv kv(KvDType::kBfloat16, KvLayout::kNHD, 8, 16, 2, 128);
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
    DeviceKv kv(KvDType::kBfloat16, KvLayout::kHND, static_cast<int>(ids.size()), 16, heads, st.channels / heads);
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
  DeviceKv kv(KvDType::kFloat32, KvLayout::kNHD, 1, 32, 1, 32);
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
  DeviceKv kv(KvDType::kFloat32, KvLayout::kNHD, 2, 16, 1, 32);
  const Scheme lynx = MustParse("lynx");
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, kv.view(), 32, {0, 2}).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, kv.view(), 32, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, kv.view(), 48, {0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);  // 48 tokens is not a multiple of the 32-token chunk
  PagedKvView no_data = kv.view();
  no_data.data = nullptr;
  EXPECT_EQ(EncodePagesCuda(lynx, CodecOptions{}, no_data, 32, {0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Decodes CPU containers on the GPU into scattered blocks and compares with the CPU decode rounded to dtype.
void ExpectDecodeMatchesCpu(const std::string& scheme_name, int tokens, int channels, int heads, KvDType dtype,
                            KvLayout layout, int block_tokens, AnchorRule rule, int chunk_tokens = 32,
                            int num_pages = 3) {
  const Scheme scheme = MustParse(scheme_name);
  const int bpp = (tokens + block_tokens - 1) / block_tokens;
  std::vector<EncodedPage> enc;
  for (int p = 0; p < num_pages; ++p) {
    std::vector<float> page = Realistic(tokens, channels, 20 + p);
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
      for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND}) {
        ExpectDecodeMatchesCpu(name, 256, 512, 4, dtype, layout, 16, AnchorRule::kConditionalMean);
      }
    }
  }
}

TEST(CudaDecodeTest, CodeCentreAnchorsOddShapesAndPartialBlocksDecodeAsTheCpuDecode) {
  SKIP_WITHOUT_CUDA();
  for (const std::string& name : AllGpuSchemes()) {
    ExpectDecodeMatchesCpu(name, 64, 256, 2, KvDType::kBfloat16, KvLayout::kNHD, 16, AnchorRule::kCodeCentre);
    ExpectDecodeMatchesCpu(name, 64, 7, 1, KvDType::kFloat16, KvLayout::kHND, 16, AnchorRule::kValueCentre);
    ExpectDecodeMatchesCpu(name, 20, 40, 5, KvDType::kFloat32, KvLayout::kNHD, 16, AnchorRule::kValueCentre);
    ExpectDecodeMatchesCpu(name, 512, 64, 2, KvDType::kBfloat16, KvLayout::kHND, 128, AnchorRule::kValueCentre);
    ExpectDecodeMatchesCpu(name, 64, 7, 1, KvDType::kFloat16, KvLayout::kHND, 16, AnchorRule::kConditionalMean);
    ExpectDecodeMatchesCpu(name, 20, 40, 5, KvDType::kFloat32, KvLayout::kNHD, 16, AnchorRule::kConditionalMean);
  }
}

// A batch of 160 pages of 512 channels is 1280 tiles, more than an H100 or H200 holds at once (4 blocks on each of
// 132 SMs): later blocks reuse the slots, and pages far apart in the batch must still decode as the CPU does.
TEST(CudaDecodeTest, LargeBatchesOfMoreTilesThanResidentBlocksMatchTheCpuDecode) {
  SKIP_WITHOUT_CUDA();
  for (const std::string name : {"lynx", "lynx4", "lynx-a2r6"}) {
    ExpectDecodeMatchesCpu(name, 256, 512, 4, KvDType::kBfloat16, KvLayout::kNHD, 16, AnchorRule::kConditionalMean,
                           32, 160);
  }
}

// The tile decoder counts a chunk's top cells within its 128-token tile: chunks that straddle tiles (48 tokens;
// 256; a 200-token page shorter than its 256-token chunk) must still get the rule over the whole chunk.
TEST(CudaDecodeTest, ExactExtremesHoldForChunksThatStraddleDecodeTiles) {
  SKIP_WITHOUT_CUDA();
  for (const std::string name : {"lynx", "lynx-a2r2r4"}) {
    ExpectDecodeMatchesCpu(name, 384, 256, 2, KvDType::kBfloat16, KvLayout::kNHD, 16, AnchorRule::kConditionalMean,
                           48);
    ExpectDecodeMatchesCpu(name, 512, 256, 2, KvDType::kBfloat16, KvLayout::kHND, 16, AnchorRule::kConditionalMean,
                           256);
    ExpectDecodeMatchesCpu(name, 200, 128, 1, KvDType::kFloat16, KvLayout::kNHD, 8, AnchorRule::kConditionalMean,
                           256);
    ExpectDecodeMatchesCpu(name, 256, 256, 2, KvDType::kBfloat16, KvLayout::kNHD, 16, AnchorRule::kConditionalMean,
                           128);
    ExpectDecodeMatchesCpu(name, 256, 256, 2, KvDType::kBfloat16, KvLayout::kNHD, 16, AnchorRule::kConditionalMean,
                           16);
  }
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
    DeviceKv fresh(KvDType::kBfloat16, KvLayout::kNHD, step.pages * bpp + 3, 16, heads, 128);
    DeviceKv kept(KvDType::kBfloat16, KvLayout::kNHD, step.pages * bpp + 3, 16, heads, 128);
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

TEST(CudaDecodeTest, AnEncodeAfterASmallerDecodeInTheSameStagingLaysOutItsWholeBatch) {
  SKIP_WITHOUT_CUDA();
  const Scheme lynx = MustParse("lynx");
  DeviceKv src(KvDType::kBfloat16, KvLayout::kNHD, 32, 16, 4, 128);
  std::vector<int32_t> ids(32);
  for (int i = 0; i < 32; ++i) ids[i] = 31 - i;
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
  DeviceKv dst(KvDType::kBfloat16, KvLayout::kNHD, 32, 16, 4, 128);
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
  DeviceKv src(KvDType::kBfloat16, KvLayout::kNHD, 32, 16, 8, 128);
  std::vector<int32_t> ids(32);
  for (int i = 0; i < 32; ++i) ids[i] = 31 - i;
  std::vector<float> a = src.Place(Realistic(256, 1024, 30), 256, ids, 0);
  std::vector<float> b = src.Place(Realistic(256, 1024, 31), 256, ids, 1);
  src.Upload();
  ContainerLayout shape;
  shape.scheme = lynx;
  shape.tokens = 256;
  shape.channels = 1024;
  shape.chunk_tokens = 32;
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
  // A batch shaped for another curve is refused, not encoded with the wrong tables.
  CodecOptions plain;
  plain.top_width = 0.0f;
  EXPECT_EQ(EncodePagesCudaAsync(plain, src.view(), dev_ids, **pages).code(), absl::StatusCode::kInvalidArgument);
  DeviceKv dst(KvDType::kBfloat16, KvLayout::kHND, 32, 16, 8, 128);
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
  DeviceKv kv(KvDType::kBfloat16, KvLayout::kNHD, 2, 32, 1, 64);
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

  // An end pair index past the grid (chunk 0, channel 0) and an anchor table entry above 1, each resealed.
  auto resealed = [&](auto edit) {
    std::vector<uint8_t> b = enc->bytes;
    edit(b.data() + meta);
    ContainerLayout rl = enc->layout;
    rl.stream_crc[0] = Crc32c(&b[meta], enc->layout.stream_length[0] - meta);
    WriteContainerHeader(rl, b.data());
    return b;
  };
  const std::vector<uint8_t> bad_ends = resealed([](uint8_t* p) { p[8 * 64] = p[8 * 64 + 1] = 0xFF; p[8 * 64 + 2] |= 0x7F; });
  EXPECT_EQ(DecodePagesCuda({absl::MakeConstSpan(bad_ends)}, 1, CodecOptions{}, kv.view(), {0}).code(),
            absl::StatusCode::kDataLoss);
  const size_t tables = 8 * 64 + (64 * 23 + 7) / 8;  // one chunk of 64 channels
  const std::vector<uint8_t> bad_table = resealed([&](uint8_t* p) {
    const float big = 1.5f;
    std::memcpy(p + tables, &big, 4);
  });
  EXPECT_EQ(DecodePagesCuda({absl::MakeConstSpan(bad_table)}, 1, CodecOptions{}, kv.view(), {0}).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(DecodePagesCuda({good}, 2, CodecOptions{}, kv.view(), {0}).ok());
}

}  // namespace
}  // namespace kvt::codec::gpu
