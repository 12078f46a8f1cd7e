#include "codec/internal/lynx_frame_spikes.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/internal/lynx_avx512_common.h"
#include "codec/internal/lynx_candidate_lanes.h"
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
    {
      LynxPageMeta meta = MetaFor(tokens, channels, std::min(chunk, tokens), k);
      SelectFrameSpikes(page, meta);
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

// A page of `tokens` x `channels` for the chunk-extremes path's tests: kind 0 draws from a few values (ties
// everywhere, both zeros), 1 a normal bulk, 2 a bulk whose extremes crowd into one 16-token span (tokens 16..31,
// or the first 16 of a short page), 3 one value everywhere, 4 a bulk with its extremes at the first and last tokens.
std::vector<float> ChunkPathPage(int kind, int tokens, int channels, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(tokens) * channels);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int crowded = tokens >= 32 ? 1 : 0;  // kind 2's chunk
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      float& v = x[static_cast<size_t>(t) * channels + c];
      switch (kind) {
        case 0:
          v = rng() % 7 == 0 ? (rng() % 2 ? 0.0f : -0.0f) : static_cast<float>(static_cast<int>(rng() % 4) - 2);
          break;
        case 1: v = normal(rng); break;
        case 2: v = t / 16 == crowded ? (t % 2 ? 10.0f + t % 16 : -10.0f - t % 16) : normal(rng); break;
        case 3: v = 1.5f; break;
        default: v = t == 0 ? 50.0f + c : (t == tokens - 1 ? -50.0f - c : normal(rng)); break;
      }
    }
  }
  return x;
}

// ChannelCandidateChunks of channels [c0, c0 + 16) at once through CandidateLanes (AVX-512): channel c0 + l's lists
// at bottom[l], top[l].
KVT_AVX512 void ChannelCandidateChunks16(const ChunkExtremes& e, const LynxPageMeta& meta, int c0,
                                         CandidateList* bottom, CandidateList* top) {
  thread_local CandidateLanes lanes;
  lanes.Reset(1, std::min(meta.frame_spikes + 1, meta.num_chunks));
  for (int k = 0; k < meta.num_chunks; ++k) {
    const size_t i = static_cast<size_t>(k) * meta.channels + c0;
    lanes.Offer(0, _mm512_loadu_ps(&e.min[i]), _mm512_loadu_ps(&e.max[i]), k);
  }
  lanes.Read(0, bottom, top);
}

// The chunk-extremes path (ScanChunkExtremes, the candidate chunks, SelectChannelFrameSpikes) against the
// reference (SelectFrameSpikes, then the statistics of MaskFrameSpikes' copy): the same spikes bit for bit, the
// masked page's channel range and every masked chunk's min, max and sum; the AVX-512 candidate lists equal the
// scalar ones.
TEST(LynxFrameSpikesTest, TheChunkExtremesPathSelectsAndMasksAsTheReference) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 150; ++trial) {
    const int kind = trial % 5;
    const int chunk = trial % 7 == 0 ? 4 : 16;
    const int tokens =
        trial % 11 == 0 ? 1 + static_cast<int>(rng() % chunk) : chunk * (1 + static_cast<int>(rng() % 24));
    const int channels = 1 + static_cast<int>(rng() % 70);
    const int chunk_len = std::min(chunk, tokens);
    const int k = std::min(1 + static_cast<int>(rng() % 7), chunk_len - 1);
    if (k < 1) continue;
    const Centering centering = trial % 2 ? Centering::kMean : Centering::kMidrange;
    const std::vector<float> x = ChunkPathPage(kind, tokens, channels, rng);
    const PageView page{x.data(), tokens, channels, 0};
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": kind " << kind << ", " << tokens << " x " << channels
                                      << ", k " << k);
    LynxPageMeta want = MetaFor(tokens, channels, chunk_len, k);
    SelectFrameSpikes(page, want);
    std::vector<float> masked(x.size());
    MaskFrameSpikes(page, want, masked.data());

    LynxPageMeta got = MetaFor(tokens, channels, chunk_len, k);
    ChunkExtremes e;
    e.Resize(static_cast<size_t>(got.num_chunks) * channels, centering == Centering::kMean);
    ASSERT_TRUE(ScanChunkExtremes(page, got, centering, 0, channels, e));
    for (int c = 0; c < channels; ++c) {
      CandidateList bottom, top;
      ChannelCandidateChunks(e, got, c, bottom, top);
      if (ImplAvailable(CodecImpl::kAvx512) && c % 16 == 0 && c + 16 <= channels) {
        CandidateList vb[16], vt[16];
        ChannelCandidateChunks16(e, got, c, vb, vt);
        for (int l = 0; l < 16; ++l) {
          CandidateList sb, st;
          ChannelCandidateChunks(e, got, c + l, sb, st);
          for (int j = 0; j < std::min(k + 1, got.num_chunks); ++j) {
            ASSERT_EQ(vb[l][j], sb[j]) << "channel " << c + l << " bottom " << j;
            ASSERT_EQ(vt[l][j], st[j]) << "channel " << c + l << " top " << j;
          }
        }
      }
      SelectChannelFrameSpikes(page, centering, bottom, top, c, e, got);
    }
    const float inv_n = 1.0f / static_cast<float>(chunk_len);
    for (int c = 0; c < channels; ++c) {
      for (int j = 0; j < k; ++j) {
        const size_t s = static_cast<size_t>(j) * channels + c;
        ASSERT_EQ(got.frame_token[s], want.frame_token[s]) << "channel " << c << " spike " << j;
        ASSERT_EQ(std::memcmp(&got.frame_value[s], &want.frame_value[s], 4), 0);
      }
      float lo = INFINITY, hi = -INFINITY;
      for (int kk = 0; kk < got.num_chunks; ++kk) {
        float mn = INFINITY, mx = -INFINITY, sum = 0.0f;
        for (int t = kk * chunk_len; t < (kk + 1) * chunk_len; ++t) {
          const float v = masked[static_cast<size_t>(t) * channels + c];
          mn = std::min(mn, v);
          mx = std::max(mx, v);
          const float term = v * inv_n;
          sum = sum + term;
        }
        lo = std::min(lo, mn);
        hi = std::max(hi, mx);
        const size_t i = static_cast<size_t>(kk) * channels + c;
        ASSERT_EQ(e.min[i], mn) << "channel " << c << " chunk " << kk;
        ASSERT_EQ(e.max[i], mx) << "channel " << c << " chunk " << kk;
        if (centering == Centering::kMean) {
          ASSERT_EQ(std::memcmp(&e.sum[i], &sum, 4), 0) << "channel " << c << " chunk " << kk;
        }
      }
      EXPECT_EQ(got.lo[c], lo) << "channel " << c;
      EXPECT_EQ(got.hi[c], hi) << "channel " << c;
      EXPECT_FALSE(std::signbit(got.lo[c]) && got.lo[c] == 0.0f) << "channel " << c;
      EXPECT_FALSE(std::signbit(got.hi[c]) && got.hi[c] == 0.0f) << "channel " << c;
    }
  }
}

KVT_AVX512 void OfferChunk(CandidateLanes& lanes, int g, const float* mn, const float* mx, int chunk) {
  lanes.Offer(g, _mm512_loadu_ps(mn), _mm512_loadu_ps(mx), chunk);
}

// CandidateLanes as the AVX-512 statistics pass uses it (several 16-channel groups, each offered chunk by chunk,
// the groups interleaved) against ChannelCandidateChunks: chunk extremes drawn from a few values (ties between
// chunks, -0 beside +0, constant channels, the channel's extremes in its first and last chunk), lists of 1 to 8
// entries and pages with fewer chunks than that.
TEST(LynxFrameSpikesTest, CandidateLanesOfferedChunkByChunkGiveTheScalarListsWithTies) {
  if (!ImplAvailable(CodecImpl::kAvx512)) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(31);
  const float values[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 3.0f, 1e30f};
  for (int trial = 0; trial < 200; ++trial) {
    const int chunks = 1 + static_cast<int>(rng() % 40);
    const int channels = 16 * (1 + static_cast<int>(rng() % 4));
    const int k = 1 + static_cast<int>(rng() % kMaxFrameSpikes);
    const LynxPageMeta meta = MetaFor(chunks * 16, channels, 16, k);
    ChunkExtremes e;
    e.Resize(static_cast<size_t>(chunks) * channels, false);
    for (int c = 0; c < channels; ++c) {
      const int kind = c % 4;  // 0: few values; 1: constant; 2: extremes first and last; 3: distinct
      for (int kk = 0; kk < chunks; ++kk) {
        const size_t i = static_cast<size_t>(kk) * channels + c;
        float a = values[rng() % 7], b = values[rng() % 7];
        if (kind == 1) a = b = 0.5f;
        if (kind == 2) a = kk == 0 ? -5.0f : (kk == chunks - 1 ? -5.0f : a), b = kk == chunks - 1 ? 5.0f : b;
        if (kind == 3) a = static_cast<float>(rng() % 1000), b = a + static_cast<float>(rng() % 1000);
        e.min[i] = std::min(a, b);
        e.max[i] = std::max(a, b);
      }
    }
    const int keep = std::min(k + 1, chunks);
    CandidateLanes lanes;
    lanes.Reset(channels / 16, keep);
    for (int kk = 0; kk < chunks; ++kk) {
      for (int g = 0; g < channels / 16; ++g) {
        const size_t i = static_cast<size_t>(kk) * channels + 16 * g;
        OfferChunk(lanes, g, &e.min[i], &e.max[i], kk);
      }
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << chunks << " chunks, " << channels
                                      << " channels, k " << k);
    for (int g = 0; g < channels / 16; ++g) {
      CandidateList vb[16], vt[16];
      lanes.Read(g, vb, vt);
      for (int l = 0; l < 16; ++l) {
        CandidateList sb, st;
        ChannelCandidateChunks(e, meta, 16 * g + l, sb, st);
        for (int j = 0; j < keep; ++j) {
          ASSERT_EQ(vb[l][j], sb[j]) << "channel " << 16 * g + l << " bottom " << j;
          ASSERT_EQ(vt[l][j], st[j]) << "channel " << 16 * g + l << " top " << j;
        }
      }
    }
  }
}

TEST(LynxFrameSpikesTest, ScanChunkExtremesRejectsNaNAndInfinities) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> x(64 * 3, 1.0f);
    x[63 * 3 + 2] = bad;  // the last token of the last channel
    LynxPageMeta meta = MetaFor(64, 3, 16, 3);
    ChunkExtremes e;
    e.Resize(4 * 3, false);
    EXPECT_TRUE(ScanChunkExtremes(PageView{x.data(), 64, 3, 0}, meta, Centering::kMidrange, 0, 2, e));
    EXPECT_FALSE(ScanChunkExtremes(PageView{x.data(), 64, 3, 0}, meta, Centering::kMidrange, 0, 3, e)) << bad;
  }
}

// Codes of the unmasked page, fixed: each spike's code is its substitute's (the token MaskFrameSpikes takes its
// value from), in code bytes and in packed nibble streams alike; nothing else changes.
TEST(LynxFrameSpikesTest, SpikeCodesAreCopiedFromTheirSubstitutes) {
  const int tokens = 48, channels = 6, k = 3;
  LynxPageMeta meta = MetaFor(tokens, channels, 16, k);
  // Channel c's spikes: the chunk's first two tokens and the page's last (0, 1, 47), the last three tokens of a
  // chunk (13, 14, 15), spikes in three chunks (0, 16, 32), ...
  const int spikes[channels][k] = {{0, 1, 47}, {13, 14, 15}, {0, 16, 32}, {16, 17, 18}, {5, 20, 21}, {31, 32, 47}};
  for (int c = 0; c < channels; ++c) {
    for (int j = 0; j < k; ++j) meta.frame_token[j * channels + c] = static_cast<uint16_t>(spikes[c][j]);
  }
  std::vector<float> token_of(tokens * channels);  // value (t, c) = t: masking gives the substitute's token
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) token_of[t * channels + c] = static_cast<float>(t);
  }
  std::vector<float> substitute(token_of.size());
  MaskFrameSpikes(PageView{token_of.data(), tokens, channels, 0}, meta, substitute.data());
  std::mt19937 rng(3);
  std::vector<uint8_t> codes(tokens * channels);
  for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> nibbles[2];
  for (int s = 0; s < 2; ++s) {
    nibbles[s].assign(codes.size() / 2, 0);
    for (size_t i = 0; i < codes.size(); ++i) nibbles[s][i / 2] |= ((codes[i] >> (4 * (1 - s))) & 15) << (4 * (i % 2));
  }
  std::vector<uint8_t> fixed = codes;
  CopyFrameSpikeCodes(meta, fixed.data());
  uint8_t* streams[2] = {nibbles[0].data(), nibbles[1].data()};
  CopyFrameSpikeNibbles(meta, 2, streams);
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      const size_t i = static_cast<size_t>(t) * channels + c;
      const int from = static_cast<int>(substitute[i]);
      EXPECT_EQ(fixed[i], codes[static_cast<size_t>(from) * channels + c]) << "token " << t << ", channel " << c;
      const int packed = (nibbles[0][i / 2] >> (4 * (i % 2)) & 15) << 4 | (nibbles[1][i / 2] >> (4 * (i % 2)) & 15);
      EXPECT_EQ(packed, fixed[i]) << "token " << t << ", channel " << c;
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
  SelectFrameSpikes(PageView{x.data(), tokens, channels, 0}, meta);
  EXPECT_EQ(meta.frame_token[0], 0);
  EXPECT_EQ(meta.frame_token[1], 37);
  // With three, the next removal that narrows the frame most: token 50 at the top.
  meta = MetaFor(tokens, channels, 16, 3);
  SelectFrameSpikes(PageView{x.data(), tokens, channels, 0}, meta);
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

TEST(LynxFrameSpikesTest, ChecksNameTheFirstBadSpikeInChannelOrderOnWideOddPages) {
  // 37 channels, 3 spikes each at tokens 0, c + 1 and 2047 (the page's first and last).
  const int channels = 37, k = 3;
  LynxPageMeta meta = MetaFor(2048, channels, 16, k);
  auto reset = [&] {
    for (int c = 0; c < channels; ++c) {
      const uint16_t t[3] = {0, static_cast<uint16_t>(c + 1), 2047};
      for (int j = 0; j < k; ++j) {
        meta.frame_token[j * channels + c] = t[j];
        meta.frame_value[j * channels + c] = j == 1 ? -0.0f : 3e38f;
      }
    }
  };
  reset();
  ASSERT_TRUE(CheckFrameSpikes(meta).ok());
  struct Edit {
    int j, c;
    uint16_t token;
    float value;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const Edit& e : {Edit{2, 36, 2048, 3e38f}, Edit{1, 36, 0, 1.0f}, Edit{2, 20, 21, 1.0f},
                        Edit{0, 0, 0, -inf}, Edit{2, 17, 2047, std::nanf("")}, Edit{1, 31, 32, inf}}) {
    reset();
    meta.frame_token[e.j * channels + e.c] = e.token;
    meta.frame_value[e.j * channels + e.c] = e.value;
    // A second bad spike in a later channel: the message names the first. (Not over an edit of channel 36
    // itself: its token one past the page must be what is checked.)
    if (e.c < 36) meta.frame_token[2 * channels + 36] = 2100;
    const absl::Status st = CheckFrameSpikes(meta);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(st.message().find(absl::StrCat("bad frame spike ", e.j, " of channel ", e.c, " ")),
              absl::string_view::npos)
        << st;
  }
}

}  // namespace
}  // namespace kvt::codec::internal
