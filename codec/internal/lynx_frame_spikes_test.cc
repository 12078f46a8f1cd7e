#include "codec/internal/lynx_frame_spikes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "codec/codec.h"
#include "codec/options.h"
#include "gtest/gtest.h"

namespace kvt::codec::internal {
namespace {

// The rule of lynx_frame_spikes.h, written out with a full sort: the spike tokens of channel c, increasing.
std::vector<int> BruteForceSpikes(const std::vector<float>& x, int tokens, int channels, int c, int k) {
  std::vector<int> order(tokens);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a * channels + c] < x[b * channels + c]; });
  int best = 0;
  double best_range = 0;
  for (int i = 0; i <= k; ++i) {
    const double range = static_cast<double>(x[order[tokens - 1 - (k - i)] * channels + c]) -
                         static_cast<double>(x[order[i] * channels + c]);
    if (i == 0 || range < best_range) {
      best = i;
      best_range = range;
    }
  }
  std::vector<int> spikes;
  for (int j = 0; j < best; ++j) spikes.push_back(order[j]);
  for (int j = 0; j < k - best; ++j) spikes.push_back(order[tokens - 1 - j]);
  std::sort(spikes.begin(), spikes.end());
  return spikes;
}

LynxPageMeta MetaFor(int tokens, int channels, int chunk_len, int k) {
  LynxPageMeta meta;
  meta.Resize(tokens, channels, chunk_len, false, 14, k);
  return meta;
}

TEST(LynxFrameSpikesTest, SelectionEqualsTheSortedRuleOnEveryScanWithTiesAndSignedZeros) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int chunk = 16;
    const int tokens = trial % 5 == 0 ? 1 + static_cast<int>(rng() % 15) : 16 * (1 + static_cast<int>(rng() % 8));
    const int channels = 1 + static_cast<int>(rng() % 40);
    const int k = std::min(static_cast<int>(rng() % 8), std::min(chunk, tokens) - 1);
    std::vector<float> x(static_cast<size_t>(tokens) * channels);
    for (float& v : x) {
      switch (rng() % 5) {
        case 0: v = static_cast<float>(static_cast<int>(rng() % 5) - 2); break;  // many ties
        case 1: v = rng() % 2 ? 0.0f : -0.0f; break;
        case 2: v = std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, static_cast<int>(rng() % 60) - 30); break;
        default: v = std::normal_distribution<float>(0.0f, 1.0f)(rng); break;
      }
    }
    const PageView page{x.data(), tokens, channels, 0};
    for (bool avx512 : {false, true}) {
      if (avx512 && !ImplAvailable(CodecImpl::kAvx512)) continue;
      LynxPageMeta meta = MetaFor(tokens, channels, std::min(chunk, tokens), k);
      SelectFrameSpikes(page, avx512, meta);
      for (int c = 0; c < channels; ++c) {
        const std::vector<int> want = BruteForceSpikes(x, tokens, channels, c, k);
        for (int j = 0; j < k; ++j) {
          const size_t s = static_cast<size_t>(j) * channels + c;
          ASSERT_EQ(meta.frame_token[s], want[j]) << "trial " << trial << " channel " << c << " spike " << j;
          ASSERT_EQ(std::memcmp(&meta.frame_value[s], &x[want[j] * channels + c], 4), 0);
        }
      }
      EXPECT_TRUE(CheckFrameSpikes(meta).ok());
    }
  }
}

TEST(LynxFrameSpikesTest, ASinkOnOneSideAndAnOutlierOnTheOtherAreBothTaken) {
  const int tokens = 64, channels = 1;
  std::vector<float> x(tokens);
  for (int t = 0; t < tokens; ++t) x[t] = 0.01f * static_cast<float>(t % 7);
  x[0] = 40.0f;   // a sink token
  x[37] = -9.0f;  // an outlier below
  x[50] = 0.5f;   // the largest of the bulk, above the rest
  LynxPageMeta meta = MetaFor(tokens, channels, 16, 2);
  SelectFrameSpikes(PageView{x.data(), tokens, channels, 0}, false, meta);
  EXPECT_EQ(meta.frame_token[0], 0);
  EXPECT_EQ(meta.frame_token[1], 37);
  // With three, the next removal that narrows the frame most: token 50 at the top.
  meta = MetaFor(tokens, channels, 16, 3);
  SelectFrameSpikes(PageView{x.data(), tokens, channels, 0}, false, meta);
  EXPECT_EQ(meta.frame_token[0], 0);
  EXPECT_EQ(meta.frame_token[1], 37);
  EXPECT_EQ(meta.frame_token[2], 50);
}

TEST(LynxFrameSpikesTest, MaskingPutsTheChunksFirstNonSpikeValueInEachSpikesPlace) {
  const int tokens = 32, channels = 2;
  std::vector<float> x(tokens * channels);
  for (int i = 0; i < tokens * channels; ++i) x[i] = static_cast<float>(i);
  LynxPageMeta meta = MetaFor(tokens, channels, 16, 3);
  // Channel 0: tokens 0, 1 and 20 (the first two head their chunk); channel 1: 5, 17, 31.
  const int spikes[2][3] = {{0, 1, 20}, {5, 17, 31}};
  for (int c = 0; c < channels; ++c) {
    for (int j = 0; j < 3; ++j) meta.frame_token[j * channels + c] = static_cast<uint16_t>(spikes[c][j]);
  }
  std::vector<float> masked(x.size());
  MaskFrameSpikes(PageView{x.data(), tokens, channels, 0}, meta, masked.data());
  auto at = [&](const std::vector<float>& v, int t, int c) { return v[t * channels + c]; };
  EXPECT_EQ(at(masked, 0, 0), at(x, 2, 0));
  EXPECT_EQ(at(masked, 1, 0), at(x, 2, 0));
  EXPECT_EQ(at(masked, 20, 0), at(x, 16, 0));
  EXPECT_EQ(at(masked, 5, 1), at(x, 0, 1));
  EXPECT_EQ(at(masked, 17, 1), at(x, 16, 1));
  EXPECT_EQ(at(masked, 31, 1), at(x, 16, 1));
  int changed = 0;
  for (size_t i = 0; i < x.size(); ++i) changed += masked[i] != x[i];
  EXPECT_EQ(changed, 6);
}

TEST(LynxFrameSpikesTest, DecodedFrameSpikesAreExactAtEveryStage) {
  const int tokens = 256, channels = 40;
  std::mt19937 rng(5);
  std::vector<float> x(tokens * channels);
  for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  for (int c = 0; c < channels; ++c) x[c] = 100.0f + c;            // a sink at token 0
  for (int c = 0; c < channels; c += 3) x[99 * channels + c] = -3e5f;  // and an outlier
  for (CodecImpl impl : {CodecImpl::kReference, CodecImpl::kAvx2, CodecImpl::kAvx512}) {
    if (!ImplAvailable(impl)) continue;
    CodecOptions o;
    o.impl = impl;
    absl::StatusOr<EncodedPage> enc = EncodePage(*ParseScheme("lynx"), o, PageView{x.data(), tokens, channels, 0});
    ASSERT_TRUE(enc.ok()) << enc.status();
    for (int stages = 1; stages <= 2; ++stages) {
      std::vector<float> out(x.size());
      ASSERT_TRUE(DecodePage(enc->bytes, stages, MutablePageView{out.data(), tokens, channels, 0}, o).ok());
      for (int c = 0; c < channels; ++c) {
        EXPECT_EQ(out[c], x[c]) << "sink, channel " << c << ", stage " << stages;
        if (c % 3 == 0) {
          EXPECT_EQ(out[99 * channels + c], x[99 * channels + c]) << "outlier, channel " << c;
        }
      }
      // The outlier left the frame: the other values decode to the bulk's precision, not the outlier's.
      double err = 0;
      for (int t = 1; t < tokens; ++t) {
        if (t != 99) err = std::max(err, static_cast<double>(std::fabs(out[t * channels] - x[t * channels])));
      }
      EXPECT_LT(err, stages == 2 ? 0.05 : 0.6) << "stage " << stages;
    }
  }
}

TEST(LynxFrameSpikesTest, ChecksRejectWhatNoEncoderWrites) {
  LynxPageMeta meta = MetaFor(64, 2, 16, 2);
  const uint16_t tokens[4] = {3, 5, 9, 9};  // (j, c): channel 0 gets 3, 9; channel 1 gets 5, 9
  for (int i = 0; i < 4; ++i) {
    meta.frame_token[i] = tokens[i];
    meta.frame_value[i] = 1.0f;
  }
  EXPECT_TRUE(CheckFrameSpikes(meta).ok());
  meta.frame_token[2] = 3;  // channel 0: 3, 3
  EXPECT_EQ(CheckFrameSpikes(meta).code(), absl::StatusCode::kDataLoss);
  meta.frame_token[2] = 64;  // past the page
  EXPECT_EQ(CheckFrameSpikes(meta).code(), absl::StatusCode::kDataLoss);
  meta.frame_token[2] = 9;
  meta.frame_value[1] = std::nanf("");
  EXPECT_EQ(CheckFrameSpikes(meta).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvt::codec::internal
