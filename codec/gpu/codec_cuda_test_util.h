// Helpers of the CUDA codec tests (codec_cuda_test.cc: encodes; codec_cuda_decode_test.cc: decodes): a paged
// KV cache in device memory mirrored on the host, scattered block ids, realistic pages, and the values the GPU
// stores for each input dtype.
#ifndef KVT_CODEC_GPU_CODEC_CUDA_TEST_UTIL_H_
#define KVT_CODEC_GPU_CODEC_CUDA_TEST_UTIL_H_

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
#include "codec/gpu/codec_cuda.h"
#include "common/cuda_util.h"
#include "codec/gpu/host_containers.h"
#include "numerics/float16.h"
#include "codec/test_pages.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu::test_util {

namespace ff = ::kvt::numerics;

#define SKIP_WITHOUT_CUDA()                                                             \
  do {                                                                                  \
    absl::StatusOr<int> n = CudaDeviceCount();                                          \
    if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();                      \
    if (*n == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned 0";       \
  } while (0)

inline const std::vector<std::string>& AllGpuSchemes() {
  static const auto* names = new std::vector<std::string>{
      "bf16", "int8", "int4", "fp8", "lynx", "lynx-a2r6", "lynx-a3r5", "lynx-a4r4", "lynx-a2r2r4", "lynx8", "lynx4",
      "lynx-a1r3r4", "lynx-a3r2r3", "lynx+e23+f0", "lynx8+e13+f1"};
  return *names;
}

inline Scheme MustParse(const std::string& name) {
  absl::StatusOr<Scheme> s = ParseScheme(name);
  EXPECT_TRUE(s.ok()) << name << ": " << s.status();
  return *s;
}

// What the GPU stores for an input float of `dtype` (the value the CPU reference must see).
inline uint16_t Bf16Rne(float x) {
  const uint32_t b = ff::FloatBits(x);
  return static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}
inline uint16_t F16Rne(float x) {
  if (std::fabs(x) >= 65520.0f) return static_cast<uint16_t>((std::signbit(x) ? 0x8000 : 0) | 0x7C00);
  return ff::FloatToF16(x, ff::F16Round::kNearestEven);
}
inline float RoundTo(KvDType dtype, float x) {
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
    if (view_.layout == KvLayout::kNhd) {
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
inline std::vector<int32_t> ScatteredIds(int needed, int total, uint32_t seed) {
  std::vector<int32_t> all(total);
  for (int i = 0; i < total; ++i) all[i] = i;
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(needed);
  return all;
}
// Block ids n - 1, ..., 0: pages whose blocks run backwards through the cache.
inline std::vector<int32_t> ReversedIds(int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = n - 1 - i;
  return ids;
}
inline std::vector<float> Realistic(int tokens, int channels, uint64_t seed) {
  return RealisticPage(tokens, channels, seed).data;
}
// `page` repeated over whole 32-token chunks (at most 256 tokens) and a multiple of 64 channels: the shape the lynx
// tile kernels take.
inline TestPage InTileShape(const TestPage& page) {
  TestPage tiled{page.name, std::min(256, (page.tokens + 31) / 32 * 32), (page.channels + 63) / 64 * 64, {}};
  tiled.data.resize(static_cast<size_t>(tiled.tokens) * tiled.channels);
  for (int t = 0; t < tiled.tokens; ++t) {
    for (int c = 0; c < tiled.channels; ++c) {
      tiled.data[static_cast<size_t>(t) * tiled.channels + c] =
          page.data[static_cast<size_t>(t % page.tokens) * page.channels + c % page.channels];
    }
  }
  return tiled;
}

}  // namespace kvt::codec::gpu::test_util

#endif  // KVT_CODEC_GPU_CODEC_CUDA_TEST_UTIL_H_
