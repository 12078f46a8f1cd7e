#include "codec/test_pages.h"

#include <cmath>
#include <limits>
#include <random>

namespace kvt::codec {

TestPage RealisticPage(int tokens, int channels, uint64_t seed) {
  TestPage p{"realistic", tokens, channels, std::vector<float>(static_cast<size_t>(tokens) * channels)};
  std::mt19937_64 rng(seed);
  std::exponential_distribution<float> expo(1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> scale(channels, 1.0f), offset(channels, 0.0f);
  for (int c = 0; c < channels; ++c) {
    if (rng() % 64 == 0) scale[c] = 20.0f + 60.0f * uni(rng);
    offset[c] = 0.3f * (uni(rng) - 0.5f) * scale[c];
  }
  for (int t = 0; t < tokens; ++t) {
    const float token_gain = t == 0 ? 6.0f : 1.0f;
    for (int c = 0; c < channels; ++c) {
      float lap = expo(rng) * (rng() & 1 ? 1.0f : -1.0f);
      p.data[static_cast<size_t>(t) * channels + c] = offset[c] + token_gain * scale[c] * lap;
    }
  }
  return p;
}

std::vector<TestPage> AdversarialPages() {
  std::vector<TestPage> pages;
  auto make = [&](const std::string& name, int tokens, int channels, auto fill) {
    TestPage p{name, tokens, channels, std::vector<float>(static_cast<size_t>(tokens) * channels)};
    std::mt19937 rng(static_cast<uint32_t>(pages.size() + 7));
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < channels; ++c) p.data[static_cast<size_t>(t) * channels + c] = fill(t, c, rng);
    }
    pages.push_back(std::move(p));
  };
  auto gauss = [](std::mt19937& rng) { return std::normal_distribution<float>(0.0f, 1.0f)(rng); };
  const float kMax = std::numeric_limits<float>::max();
  const float kDenorm = std::numeric_limits<float>::denorm_min();
  make("constant_channels", 64, 33, [](int, int c, std::mt19937&) { return c * 0.37f - 5.0f; });
  make("all_zero", 64, 16, [](int, int, std::mt19937&) { return 0.0f; });
  make("zero_chunks_then_noise", 64, 16,
       [&](int t, int, std::mt19937& rng) { return t < 32 ? 0.0f : gauss(rng); });
  make("signed_zeros", 32, 17, [](int t, int c, std::mt19937&) { return (t + c) % 2 ? -0.0f : 0.0f; });
  make("denormals", 32, 16, [&](int t, int c, std::mt19937&) { return ((t * 7 + c) % 5 - 2) * kDenorm; });
  make("denormals_and_normals", 32, 16,
       [&](int t, int c, std::mt19937& rng) { return c % 2 ? 100.0f * kDenorm * (t % 3) : gauss(rng); });
  // Each chunk-channel spans [-2^18, 2^18] (centre exactly 0, half-width 2^18); its other values are fp32 and bf16
  // subnormals of both signs and -0, whose scaled offsets underflow: the negative ones to -0, which codes as +0.
  make("underflow_to_minus_zero", 32, 16, [&](int t, int c, std::mt19937&) {
    if (t % 8 < 2) return t % 8 == 0 ? 262144.0f : -262144.0f;
    const float unit = c % 2 ? std::ldexp(1.0f, -133) : kDenorm;
    return t % 8 == 7 ? -0.0f : static_cast<float>((t + c) % 5 - 2) * unit;
  });
  make("outliers_1e4", 64, 40, [&](int t, int c, std::mt19937& rng) {
    return (t * 13 + c) % 97 == 0 ? 1e4f * (c % 2 ? 1.0f : -1.0f) : gauss(rng);
  });
  make("huge_3e38", 32, 16, [&](int t, int c, std::mt19937& rng) {
    return (t + c) % 3 == 0 ? 3e38f : ((t + c) % 3 == 1 ? -3e38f : gauss(rng) * 1e37f);
  });
  make("flt_max_extremes", 32, 8, [&](int t, int, std::mt19937&) { return t % 2 ? kMax : -kMax; });
  make("single_token", 1, 19, [&](int, int, std::mt19937& rng) { return gauss(rng); });
  make("odd_channels_short_page", 7, 1023, [&](int, int, std::mt19937& rng) { return gauss(rng); });
  make("one_channel", 96, 1, [&](int, int, std::mt19937& rng) { return gauss(rng); });
  make("tiny_range_big_offset", 64, 16, [&](int t, int c, std::mt19937&) { return 1000.0f + 1e-4f * ((t + c) % 9); });
  make("single_spike_per_chunk", 64, 16,
       [&](int t, int c, std::mt19937& rng) { return t % 32 == c % 32 ? 500.0f : gauss(rng); });
  make("ramp", 64, 8, [&](int t, int c, std::mt19937&) { return (t - 31.5f) * (c + 1); });
  // Frame spikes (docs/FORMAT.md, version 4) where their selection's shortcuts are tested, on pages of whole
  // vectors of channels: many chunk extremes tied (a few values and both zeros), a channel's extremes crowded into
  // one chunk, and extremes at the page's first and last tokens.
  make("frame_spike_ties", 256, 48, [&](int t, int c, std::mt19937& rng) {
    const uint32_t r = rng();
    return r % 7 == 0 ? (r % 2 ? 0.0f : -0.0f) : static_cast<float>(static_cast<int>(r % 4) - 2) * (1 + c % 3);
  });
  // Chunks 0 to 3 tie at a channel's second least value, below the bulk, and chunk 4 holds its least: candidate
  // chunks tied in value, ordered by token.
  make("frame_spike_tied_chunk_minima", 128, 32, [&](int t, int c, std::mt19937& rng) {
    if (t < 64 && t % 16 == (c + t / 16) % 16) return -50.0f;
    return t == 64 + c % 16 ? -100.0f : 0.1f * gauss(rng);
  });
  make("frame_spikes_in_one_chunk", 128, 32, [&](int t, int c, std::mt19937& rng) {
    if (t / 16 == 1 + c % 3) return t % 2 ? 20.0f + t % 16 + c : -20.0f - t % 16;
    return gauss(rng);
  });
  make("frame_spikes_first_and_last_token", 96, 32, [&](int t, int c, std::mt19937& rng) {
    return t == 0 ? 40.0f + c : (t == 95 ? -40.0f - c : gauss(rng));
  });
  return pages;
}

}  // namespace kvt::codec
