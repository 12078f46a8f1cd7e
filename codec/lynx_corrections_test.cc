// The three corrections of docs/CODEC.md to the Lynx paper's Algorithm 1. Each test states a property kvt's
// codec must have, checks it on EncodePage / DecodePage, and shows that Algorithm 1 as written (modelled here
// in a few lines) violates it, so the test would fail on the paper's procedure.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/internal/lynx_math.h"
#include "codec/test_pages.h"
#include "gtest/gtest.h"

namespace kvt::codec {
namespace {

using internal::LynxTables;

// Partial decodes here test the anchor rules themselves: without the exact-extremes rule unless asked.
std::vector<float> Decode(const EncodedPage& enc, int stages, AnchorRule rule = AnchorRule::kValueCentre,
                          bool exact_extremes = false) {
  std::vector<float> out(static_cast<size_t>(enc.layout.tokens) * enc.layout.channels);
  CodecOptions o;
  o.anchor_rule = rule;
  o.exact_extremes = exact_extremes;
  EXPECT_TRUE(DecodePage(enc.bytes, stages, MutablePageView{out.data(), enc.layout.tokens, enc.layout.channels, 0}, o)
                  .ok());
  return out;
}

// exact_extremes also shapes the encoder's anchor tables (the rule's singles are left out of the top cell's).
// These tests are about the codes and the anchor rules, whose properties do not depend on the metadata's format:
// pages are written with 32-token chunks, 23-bit end pairs and no frame spikes, so that the test data can put
// every chunk's ends exactly on the grid (frame spikes would take a page's extremes out of the frame).
EncodedPage Encode(const char* scheme, const std::vector<float>& data, int tokens, int channels,
                   bool exact_extremes = true) {
  CodecOptions o;
  o.exact_extremes = exact_extremes;
  o.chunk_tokens = 32;
  absl::StatusOr<EncodedPage> enc =
      EncodePage(*ParseScheme(absl::StrCat(scheme, "+e23+f0")), o, PageView{data.data(), tokens, channels, 0});
  EXPECT_TRUE(enc.ok()) << enc.status();
  return *std::move(enc);
}

// Algorithm 1's per-value steps for one chunk of page-normalized values, returning the reconstruction of the
// full 8-bit code in the page's value domain (fp32 metadata kept exactly, as the paper's kernel does).
std::vector<float> PaperAlgorithm1FullDecode(const std::vector<float>& x, float alpha) {
  const float lo = *std::min_element(x.begin(), x.end());
  const float scale = *std::max_element(x.begin(), x.end()) - lo;
  const float eps = 1e-6f;
  std::vector<float> xn(x.size());
  float mean = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xn[i] = (x[i] - lo) / (scale + eps);
    mean += xn[i] / x.size();
  }
  float sigma = 0;
  for (float v : xn) sigma = std::max(sigma, std::fabs(v - mean));
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float xf = (xn[i] - mean) / (sigma + eps);
    const int mag = static_cast<int>(std::lround(std::log1p(alpha * std::fabs(xf)) / std::log1p(alpha) * 127));
    const int sign = xn[i] > 0 ? 1 : (xn[i] < 0 ? -1 : 0);  // line 12: Sign(X_view), the page-normalized value
    const float v = std::expm1(mag / 127.0f * std::log1p(alpha)) / alpha;
    out[i] = lo + (mean + sigma * sign * v) * scale;
  }
  return out;
}

TEST(LynxCorrectionsTest, SignIsTakenAfterCenteringSoValuesBelowTheChunkCentreStayBelowIt) {
  // One channel, one chunk: a ramp. Every page-normalized value is >= 0, half of them lie below the centre.
  std::vector<float> x(32);
  for (int t = 0; t < 32; ++t) x[t] = 10.0f + t;
  const EncodedPage enc = Encode("lynx", x, 32, 1);
  const std::vector<float> ours = Decode(enc, 2);
  const std::vector<float> paper = PaperAlgorithm1FullDecode(x, CodecOptions{}.alpha);
  float ours_err = 0, paper_err = 0;
  for (int t = 0; t < 32; ++t) {
    ours_err = std::max(ours_err, std::fabs(ours[t] - x[t]));
    paper_err = std::max(paper_err, std::fabs(paper[t] - x[t]));
    if (x[t] < 25.5f) {
      EXPECT_LT(ours[t], 25.5f) << "token " << t;
    }
  }
  EXPECT_LT(ours_err, 0.01f * 31);   // within 1% of the range
  EXPECT_GT(paper_err, 0.5f * 31);   // Algorithm 1 mirrors the lower half above the centre
}

TEST(LynxCorrectionsTest, AnchorIsSignPlusTopMagnitudeBitsAndAnchorOnlyDecodeIsUnbiased) {
  // Chunks holding -1 and +1 and uniform values between: mu = 0 and sigma = 1 exactly, so x_final = x.
  const int tokens = 256, channels = 16;
  std::vector<float> x(tokens * channels);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) x[t * channels + c] = t % 32 == 0 ? -1.0f : (t % 32 == 1 ? 1.0f : uni(rng));
  }
  const auto tables = internal::GetLynxTables(CodecOptions{}.alpha, CodecOptions{}.top_width, 8);
  const EncodedPage enc = Encode("lynx", x, tokens, channels);
  const std::vector<float> full = Decode(enc, 2);
  const std::vector<float> anchor = Decode(enc, 1, AnchorRule::kValueCentre);
  double bias_ours = 0, bias_truncated = 0;
  int counted = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int mag = internal::MagnitudeCode(*tables, std::fabs(x[i]));
    const float sign = x[i] < 0 ? -1.0f : 1.0f;
    // Anchor + residual is exactly the 8-bit decode of (sign, I).
    ASSERT_EQ(full[i], sign * tables->full_values[mag]) << i;
    // The anchor names I's top 3 bits: the anchor-only value lies in that interval of x_final, with x's sign.
    const int h = mag >> 4;
    const float low = h == 0 ? 0.0f : tables->thresholds[h * 16];
    const float high = h == 7 ? 1.0f : tables->thresholds[(h + 1) * 16];
    ASSERT_GE(std::fabs(anchor[i]), low) << i;
    ASSERT_LE(std::fabs(anchor[i]), high) << i;
    ASSERT_EQ(std::signbit(anchor[i]), std::signbit(sign)) << i;
    if (std::fabs(x[i]) == 1.0f) continue;  // the forced extremes are not uniform within their interval
    bias_ours += std::fabs(anchor[i]) - std::fabs(x[i]);
    bias_truncated += tables->full_values[h * 16] - std::fabs(x[i]);  // residual taken as 0
    ++counted;
  }
  bias_ours /= counted;
  bias_truncated /= counted;
  EXPECT_LT(std::fabs(bias_ours), 0.005);
  EXPECT_LT(bias_truncated, -0.02);
  // Algorithm 1's anchor: V_mag = (I + 7) >> 4 reaches 8 at I = 127 and the two's-complement map gives -9..8:
  // 18 values, which do not fit the 4 bits (16 values) the anchor stream has.
  const int paper_max = (127 + 7) >> 4, paper_min = -paper_max - 1;
  EXPECT_GT(paper_max - paper_min + 1, 16);
  // kvt's anchor for the same extremes fits: sign + 3 bits.
  EXPECT_LE(127 >> 4, 7);
}

// The code's own worst error in x_final units: the largest distance from a reconstruction level to the edge of
// the interval of x_final that maps to it.
double CodeMaxGap() {
  const auto tables = internal::GetLynxTables(CodecOptions{}.alpha, CodecOptions{}.top_width, 8);
  double max_gap = 0;
  for (int i = 0; i <= tables->max_code; ++i) {
    const double a = i == 0 ? 0.0 : tables->thresholds[i];
    const double b = i == tables->max_code ? 1.0 : tables->thresholds[i + 1];
    max_gap = std::max({max_gap, tables->full_values[i] - a, b - tables->full_values[i]});
  }
  return max_gap;
}

// Decodes a one-channel page with lynx8 and checks every value against the code's own error bound, computed
// from the metadata the container stores.
void ExpectOnlyTheCodesError(const std::vector<float>& x, Centering centering) {
  const int tokens = static_cast<int>(x.size());
  CodecOptions options;
  options.centering = centering;
  options.chunk_tokens = 32;
  // Version 3's metadata (23-bit end pairs, no frame spikes), which the reading below follows.
  absl::StatusOr<EncodedPage> enc =
      EncodePage(*ParseScheme("lynx8+e23+f0"), options, PageView{x.data(), tokens, 1, 0});
  ASSERT_TRUE(enc.ok()) << enc.status();
  const std::vector<float> ours = Decode(*enc, 1);

  // The stored metadata, read back as a decoder does (docs/FORMAT.md: lo, hi, then the 23-bit end pairs).
  const uint8_t* p = enc->bytes.data() + kContainerHeaderBytes;
  float lo, hi;
  std::memcpy(&lo, p, 4);
  std::memcpy(&hi, p + 4, 4);
  const internal::ChannelFrame frame = internal::MakeChannelFrame(lo, hi, internal::kEndGridMax);
  const int chunks = tokens / 32;
  std::vector<uint32_t> pairs(chunks);
  internal::UnpackEndPairs(p + 8, chunks, 23, pairs.data());
  const double max_gap = CodeMaxGap();
  for (int k = 0; k < chunks; ++k) {
    int q_low, q_high;
    ASSERT_TRUE(internal::EndPairFromIndex(pairs[k], internal::kEndGridMax, q_low, q_high));
    float mu, sigma;
    internal::ChunkCentreAndWidth(frame, q_low, q_high, mu, sigma);
    for (int t = 32 * k; t < 32 * k + 32; ++t) {
      EXPECT_LE(std::fabs(ours[t] - x[t]), sigma * max_gap * 1.001 + 1e-5) << "token " << t;
    }
  }
}

TEST(LynxCorrectionsTest, EncoderUsesTheStoredMetadataSoDecodeErrorIsOnlyTheCodesError) {
  // Chunk 0 spans [0, 100] and is skewed (its mean sits far below its midrange); chunk 1 sits in [50, 50.1]
  // with its ends off the 4095-point grid of the channel range.
  std::vector<float> x(64);
  for (int t = 0; t < 32; ++t) x[t] = t < 8 ? 0.0f : 100.0f * t / 31.0f;
  for (int t = 32; t < 64; ++t) x[t] = 50.0f + 0.1f * (t - 32) / 31.0f + 0.013f;
  {
    SCOPED_TRACE("midrange");
    ExpectOnlyTheCodesError(x, Centering::kMidrange);
  }
  {
    SCOPED_TRACE("mean");
    ExpectOnlyTheCodesError(x, Centering::kMean);
  }
  // Algorithm 1 quantizes with the exact mean and max deviation; storing the centre on the same grid afterwards
  // (the nearest of the 4095 points over [0, 100]) moves every value of chunk 1 by the centre's rounding error,
  // several times the code's own error.
  const internal::ChannelFrame frame = internal::MakeChannelFrame(0.0f, 100.0f, internal::kEndGridMax);
  double mean = 0;
  for (int t = 32; t < 64; ++t) mean += x[t] / 32.0;
  const int below = internal::QuantizeEndBelow(frame, static_cast<float>(mean));
  const float a = internal::ChunkEnd(frame, below), b = internal::ChunkEnd(frame, below + 1);
  const float stored_mu = mean - a < b - mean ? a : b;
  const double sigma_needed = 0.05;  // chunk 1's half range
  EXPECT_GT(std::fabs(stored_mu - mean), 5 * sigma_needed * CodeMaxGap());
}

TEST(LynxCorrectionsTest, AnchorOnlyDecodeReturnsEachCellsMeanOverTheSampledValuesAndBeatsTheCellCentre) {
  // Chunks holding -1 and +1 and Laplace values between: mu = 0 and sigma = 1 exactly, so x_final = x. The
  // channels past the tables' sample (the first 64) are wider, so a table counted from them too would differ.
  const int tokens = 256, channels = 96;
  static_assert(channels > internal::kAnchorSampleChannels, "channels outside the tables' sample");
  std::vector<float> x(tokens * channels);
  std::mt19937 rng(7);
  std::exponential_distribution<float> expo(6.0f), wide(3.0f);
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      const float e = c < internal::kAnchorSampleChannels ? expo(rng) : wide(rng);
      const float v = std::fmin(e, 1.0f) * (rng() % 2 ? 1.0f : -1.0f);
      x[t * channels + c] = t % 32 == 0 ? -1.0f : (t % 32 == 1 ? 1.0f : v);
    }
  }
  const auto tables = internal::GetLynxTables(CodecOptions{}.alpha, CodecOptions{}.top_width, 8);
  const EncodedPage enc = Encode("lynx", x, tokens, channels, /*exact_extremes=*/false);
  const std::vector<float> full = Decode(enc, 2);
  const std::vector<float> mean_rule = Decode(enc, 1, AnchorRule::kConditionalMean);
  const std::vector<float> centre_rule = Decode(enc, 1, AnchorRule::kCodeCentre);
  // Per anchor magnitude cell (I >> 4): the mean of the full decode's |value| over the sampled values (tokens t %
  // 4 == 0 of the first 64 channels), which every value of the cell decodes to.
  std::vector<double> sum(8, 0.0);
  std::vector<int> n(8, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    if ((i / channels) % internal::kAnchorSampleStride != 0 || i % channels >= internal::kAnchorSampleChannels) {
      continue;
    }
    const int h = internal::MagnitudeCode(*tables, std::fabs(x[i])) >> 4;
    sum[h] += std::fabs(full[i]);
    ++n[h];
  }
  double err_mean = 0, err_centre = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int h = internal::MagnitudeCode(*tables, std::fabs(x[i])) >> 4;
    ASSERT_NEAR(std::fabs(mean_rule[i]), sum[h] / n[h], 1e-6) << i;
    if (x[i] != 0.0f) {
      ASSERT_EQ(mean_rule[i] < 0.0f, x[i] < 0.0f) << i;
    }
    err_mean += (mean_rule[i] - x[i]) * (mean_rule[i] - x[i]);
    err_centre += (centre_rule[i] - x[i]) * (centre_rule[i] - x[i]);
  }
  EXPECT_LT(err_mean, 0.9 * err_centre);
  // The top cell holds each chunk's extremes (exactly +-1 with midrange centering): its mean lies near 1.
  EXPECT_GT(sum[7] / n[7], 0.95);
}

// 32-token chunks whose first row is -1 and row plus_row +1 (mu = 0, sigma = 1: x_final = x), Laplace values
// capped at 0.8 (below the top cell) elsewhere, and 0.9 (in +1's top cell) at row 4 of channels 8 and up.
std::vector<float> ChunkEndsPage(int tokens, int channels, int plus_row, unsigned seed) {
  std::vector<float> x(static_cast<size_t>(tokens) * channels);
  std::mt19937 rng(seed);
  std::exponential_distribution<float> expo(6.0f);
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      const float v = std::fmin(expo(rng), 0.8f) * (rng() % 2 ? 1.0f : -1.0f);
      x[t * channels + c] = t % 32 == 0 ? -1.0f : (t % 32 == plus_row ? 1.0f : v);
      if (t % 32 == 4 && c >= 8) x[t * channels + c] = 0.9f;
    }
  }
  return x;
}

TEST(LynxCorrectionsTest, ExactExtremesPutEachChunksOnlyTopCellValueAtTheChunkEnd) {
  // mu = 0 and sigma = 1 in every chunk (each holds -1 and +1), Laplace values below the top cell (|x| >= ~0.87
  // at the default alpha) between; a second value shares +1's top cell in every chunk of channels 8..15 (so the
  // cell's page mean is below 1), and in chunk 2 +1's in channels 0..3 and -1's in channels 4..7.
  const int tokens = 256, channels = 16;
  std::vector<float> x = ChunkEndsPage(tokens, channels, /*plus_row=*/1, /*seed=*/11);
  for (int c = 0; c < 8; ++c) x[(64 + 8) * channels + c] = c < 4 ? 0.99f : -0.99f;
  const auto tables = internal::GetLynxTables(CodecOptions{}.alpha, CodecOptions{}.top_width, 8);
  const EncodedPage enc = Encode("lynx", x, tokens, channels);
  const std::vector<float> full = Decode(enc, 2);
  const std::vector<float> table = Decode(enc, 1, AnchorRule::kConditionalMean, false);
  const std::vector<float> exact = Decode(enc, 1, AnchorRule::kConditionalMean, true);
  ASSERT_EQ(full[0], -1.0f);  // the chunk ends decode exactly at full precision
  ASSERT_EQ(full[channels], 1.0f);
  // Top-cell members per (chunk, channel, sign), from the input (x_final = x here).
  auto top_cell = [&](size_t i) { return (internal::MagnitudeCode(*tables, std::fabs(x[i])) >> 4) == 7; };
  int singles = 0, shared = 0;
  double err_table = 0, err_exact = 0;
  for (int k = 0; k < tokens / 32; ++k) {
    for (int c = 0; c < channels; ++c) {
      int members[2] = {0, 0};
      for (int t = 32 * k; t < 32 * k + 32; ++t) {
        const size_t i = static_cast<size_t>(t) * channels + c;
        if (top_cell(i)) ++members[x[i] < 0.0f];
      }
      for (int t = 32 * k; t < 32 * k + 32; ++t) {
        const size_t i = static_cast<size_t>(t) * channels + c;
        if (top_cell(i) && members[x[i] < 0.0f] == 1) {
          ++singles;
          ASSERT_EQ(exact[i], full[i]) << "token " << t << " channel " << c;
          ASSERT_EQ(std::fabs(exact[i]), 1.0f);
        } else {
          shared += top_cell(i);
          ASSERT_EQ(exact[i], table[i]) << "token " << t << " channel " << c;
        }
        err_table += (table[i] - x[i]) * (table[i] - x[i]);
        err_exact += (exact[i] - x[i]) * (exact[i] - x[i]);
      }
    }
  }
  EXPECT_EQ(singles, 2 * (tokens / 32) * channels - (tokens / 32) * 8 - 8);  // every chunk end but the shared ones
  EXPECT_EQ(shared, 2 * (tokens / 32) * 8 + 16);
  EXPECT_LT(err_exact, err_table);
  // A full decode is untouched by the rule.
  CodecOptions o;
  o.exact_extremes = true;
  std::vector<float> full_exact(x.size());
  ASSERT_TRUE(DecodePage(enc.bytes, 2, MutablePageView{full_exact.data(), tokens, channels, 0}, o).ok());
  EXPECT_EQ(full_exact, full);
}

TEST(LynxCorrectionsTest, WithExactExtremesTheTopCellsTableEntryIsTheMeanOfTheValuesItStillDecodes) {
  // As above: every chunk holds -1 and +1 (x_final = x), and a second value (0.9) shares +1's top cell in
  // channels 8..15, so the top cell holds singles (decoded at the chunk ends) and shared values (by the table).
  // All of them sit at sampled tokens (t % 4 == 0), so the table sees every one in the first 64 channels. Past
  // those, the shared value is 0.96: a table that counted it would not be the mean below.
  const int tokens = 256, channels = 80;
  static_assert(channels > internal::kAnchorSampleChannels, "channels outside the tables' sample");
  std::vector<float> x = ChunkEndsPage(tokens, channels, /*plus_row=*/8, /*seed=*/5);
  for (int t = 4; t < tokens; t += 32) {
    for (int c = internal::kAnchorSampleChannels; c < channels; ++c) x[t * channels + c] = 0.96f;
  }
  const auto tables = internal::GetLynxTables(CodecOptions{}.alpha, CodecOptions{}.top_width, 8);
  auto top_cell = [&](size_t i) { return (internal::MagnitudeCode(*tables, std::fabs(x[i])) >> 4) == 7; };
  // Whether value i is its chunk-channel's only top-cell value of its sign.
  auto single = [&](size_t i) {
    const size_t t = i / channels, c = i % channels;
    int n = 0;
    for (size_t r = t / 32 * 32; r < t / 32 * 32 + 32; ++r) {
      n += top_cell(r * channels + c) && (x[r * channels + c] < 0.0f) == (x[i] < 0.0f);
    }
    return n == 1;
  };
  const EncodedPage with_rule = Encode("lynx", x, tokens, channels, true);
  const EncodedPage without = Encode("lynx", x, tokens, channels, false);
  const std::vector<float> full = Decode(with_rule, 2);
  const std::vector<float> exact = Decode(with_rule, 1, AnchorRule::kConditionalMean, true);
  const std::vector<float> old_table = Decode(without, 1, AnchorRule::kConditionalMean, true);
  ASSERT_EQ(full, Decode(without, 2));  // only the tables differ
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if ((i / channels) % internal::kAnchorSampleStride == 0 && i % channels < internal::kAnchorSampleChannels &&
        top_cell(i) && !single(i)) {
      sum += std::fabs(full[i]);
      ++n;
    }
  }
  ASSERT_GT(n, 0);
  double err_new = 0, err_old = 0;
  int shared = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!top_cell(i)) continue;
    if (single(i)) {
      ASSERT_EQ(exact[i], full[i]) << i;  // the rule, whichever table
      ASSERT_EQ(old_table[i], full[i]) << i;
      continue;
    }
    ++shared;
    ASSERT_NEAR(std::fabs(exact[i]), sum / n, 1e-6) << i;
    err_new += (exact[i] - x[i]) * (exact[i] - x[i]);
    err_old += (old_table[i] - x[i]) * (old_table[i] - x[i]);
  }
  EXPECT_EQ(shared, 2 * (tokens / 32) * (channels - 8));
  // Left in, the singles (at 1) pull the entry up; the shared values (0.9 and 1) then decode too far out.
  EXPECT_LT(err_new, err_old);
}

// The tables count the sampled values of the first 64 channels only, and everything else an encoder writes for a
// channel depends on that channel alone. So a wider page's first 64 channels decode, at every partial stage, bit for
// bit as the page of those 64 channels alone does: for every multi-stream layout (spikes included), both the
// reference and the fastest implementation, and both settings of the exact-extremes rule (which the tables follow
// too). Odd and even widths, and several of the GPU's 64-channel groups.
TEST(LynxCorrectionsTest, APagesFirst64ChannelsDecodeAsThoseChannelsAloneAtEveryPartialStage) {
  const int tokens = 256, narrow_channels = internal::kAnchorSampleChannels;
  for (const int channels : {80, 97, 192}) {
    const TestPage wide = RealisticPage(tokens, channels, 40 + channels);
    std::vector<float> narrow(static_cast<size_t>(tokens) * narrow_channels);
    for (int t = 0; t < tokens; ++t) {
      std::copy_n(wide.data.begin() + static_cast<size_t>(t) * channels, narrow_channels,
                  narrow.begin() + static_cast<size_t>(t) * narrow_channels);
    }
    for (const char* name : {"lynx", "lynx+spike", "lynx-a2r6", "lynx-a2r2r4"}) {
      for (const CodecImpl impl : {CodecImpl::kReference, CodecImpl::kAuto}) {
        for (const bool exact : {true, false}) {
          SCOPED_TRACE(absl::StrCat(name, ", ", channels, " channels, ", ImplName(impl), exact ? ", exact" : ""));
          CodecOptions o;
          o.impl = impl;
          o.exact_extremes = exact;
          const Scheme scheme = *ParseScheme(name);
          absl::StatusOr<EncodedPage> w = EncodePage(scheme, o, wide.view());
          absl::StatusOr<EncodedPage> n = EncodePage(scheme, o, PageView{narrow.data(), tokens, narrow_channels, 0});
          ASSERT_TRUE(w.ok() && n.ok()) << w.status() << " " << n.status();
          for (int stages = 1; stages < scheme.num_streams(); ++stages) {
            std::vector<float> wide_out(wide.data.size()), narrow_out(narrow.size());
            ASSERT_TRUE(DecodePage(w->bytes, stages, MutablePageView{wide_out.data(), tokens, channels, 0}, o).ok());
            ASSERT_TRUE(
                DecodePage(n->bytes, stages, MutablePageView{narrow_out.data(), tokens, narrow_channels, 0}, o).ok());
            for (int t = 0; t < tokens; ++t) {
              for (int c = 0; c < narrow_channels; ++c) {
                ASSERT_EQ(wide_out[static_cast<size_t>(t) * channels + c],
                          narrow_out[static_cast<size_t>(t) * narrow_channels + c])
                    << "stages " << stages << ", token " << t << ", channel " << c;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvt::codec
