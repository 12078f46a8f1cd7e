// EncodePage / DecodePage over every scheme and implementation: fidelity, identical codes across
// implementations, adversarial pages, progressive decoding and argument errors.
#include "codec/codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codec/internal/lynx_math.h"
#include "codec/test_pages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvt::codec {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> AllSchemeNames() {
  std::vector<std::string> names = StandardSchemeNames();
  // Version 4's metadata at other widths and spike counts too (the 23-bit end pairs take AVX-512's own unpack).
  for (const char* extra : {"lynx+spike", "lynx-a2r6+spike", "lynx4+spike", "lynx-a1r7", "lynx-a3r3r2",
                            "lynx-a1r1r1r1r1r1r1r1", "lynx-a2r2", "lynx+e23+f0", "lynx4+e8+f7", "lynx8+e17+f1"}) {
    names.push_back(extra);
  }
  return names;
}

Scheme MustParse(const std::string& name) {
  absl::StatusOr<Scheme> s = ParseScheme(name);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::vector<float> Decode(const EncodedPage& enc, int stages, CodecOptions options = {}) {
  std::vector<float> out(static_cast<size_t>(enc.layout.tokens) * enc.layout.channels, -12345.0f);
  MutablePageView view{out.data(), enc.layout.tokens, enc.layout.channels, 0};
  absl::Status st = DecodePage(enc.bytes, stages, view, options);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

double Nmse(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
    den += double{x[i]} * x[i];
  }
  return num / den;
}

class CodecImplTest : public ::testing::TestWithParam<CodecImpl> {
 protected:
  void SetUp() override {
    if (!ImplAvailable(GetParam())) GTEST_SKIP() << ImplName(GetParam()) << " not supported by this CPU";
  }
  CodecOptions Options() const {
    CodecOptions o;
    o.impl = GetParam();
    return o;
  }
};

TEST(PrepareCodec, AcceptsEveryStandardSchemeAndRejectsBadOptions) {
  for (const std::string& name : StandardSchemeNames()) {
    EXPECT_TRUE(PrepareCodec(*ParseScheme(name)).ok()) << name;
  }
  CodecOptions steep;
  steep.alpha = 40.0f;
  EXPECT_TRUE(PrepareCodec(*ParseScheme("lynx-a2r6"), steep).ok());
  CodecOptions bad;
  bad.alpha = 0.0f;  // below kMinAlpha
  EXPECT_EQ(PrepareCodec(*ParseScheme("lynx"), bad).code(), absl::StatusCode::kInvalidArgument);
  Scheme broken = *ParseScheme("lynx");
  broken.stage_bits[0] = 9;
  EXPECT_EQ(PrepareCodec(broken).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(CodecImplTest, EveryStandardSchemeDecodesARealisticPageWithinItsErrorBound) {
  const TestPage page = RealisticPage(256, 512, 1);
  // Upper bounds on KV NMSE, loose enough for any sane seed, tight enough to catch a broken scheme.
  const std::map<std::string, double> bound = {
      {"bf16", 1e-5}, {"int8", 1e-3},   {"int4", 0.05},      {"fp8", 2e-3}, {"lynx", 1e-3},
      {"lynx-a2r6", 1e-3}, {"lynx-a3r5", 1e-3}, {"lynx-a2r2r4", 1e-3}, {"lynx8", 1e-3}, {"lynx4", 0.05}};
  for (const std::string& name : StandardSchemeNames()) {
    SCOPED_TRACE(name);
    absl::StatusOr<EncodedPage> enc = EncodePage(MustParse(name), Options(), page.view());
    ASSERT_TRUE(enc.ok()) << enc.status();
    const std::vector<float> out = Decode(*enc, enc->layout.scheme.num_streams(), Options());
    EXPECT_LT(Nmse(page.data, out), bound.at(name));
  }
}

TEST_P(CodecImplTest, LynxAnchorTableCountsMatchTheReferenceOnLargeAndTinyPages) {
  // A 1024-channel page counts only its first 64 channels (the fused encoder's nibbles compacted, the others'
  // bytes copied); 9 / 5 / 1-token pages end on a sampled token, and the 208-, 64- and 16-channel ones are up to
  // and under the 64.
  const std::vector<TestPage> pages = {RealisticPage(1024, 1024, 5), RealisticPage(9, 208, 6),
                                       RealisticPage(5, 64, 7), RealisticPage(1, 16, 8)};
  for (const std::string name : {"lynx", "lynx-a2r2r4", "lynx4"}) {
    for (const TestPage& page : pages) {
      SCOPED_TRACE(name + " on " + page.name);
      CodecOptions ref;
      ref.impl = CodecImpl::kReference;
      CodecOptions impl = ref;
      impl.impl = GetParam();
      absl::StatusOr<EncodedPage> a = EncodePage(MustParse(name), ref, page.view());
      absl::StatusOr<EncodedPage> b = EncodePage(MustParse(name), impl, page.view());
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(a->bytes, b->bytes);
    }
  }
}

TEST_P(CodecImplTest, ProducesTheReferenceContainerBytesForEverySchemeAndPage) {
  std::vector<TestPage> pages = AdversarialPages();
  pages.push_back(RealisticPage(256, 1024, 2));
  pages.push_back(RealisticPage(64, 77, 3));
  pages.push_back(RealisticPage(64, 208, 4));  // 3 x 64 + 16 channels: the fused kernels' partial last step
  for (Centering centering : {Centering::kMidrange, Centering::kMean}) {
    for (float alpha : {4.0f, 0.5f, 60.0f}) {
      for (const std::string& name : AllSchemeNames()) {
        for (const TestPage& page : pages) {
          SCOPED_TRACE(name + " on " + page.name + " alpha " + std::to_string(alpha));
          CodecOptions ref;
          ref.impl = CodecImpl::kReference;
          ref.centering = centering;
          ref.alpha = alpha;
          CodecOptions impl = ref;
          impl.impl = GetParam();
          absl::StatusOr<EncodedPage> a = EncodePage(MustParse(name), ref, page.view());
          absl::StatusOr<EncodedPage> b = EncodePage(MustParse(name), impl, page.view());
          ASSERT_TRUE(a.ok()) << a.status();
          ASSERT_TRUE(b.ok()) << b.status();
          ASSERT_EQ(a->bytes, b->bytes);
          for (int stages = 1; stages <= a->layout.scheme.num_streams(); ++stages) {
            for (AnchorRule rule :
                 {AnchorRule::kConditionalMean, AnchorRule::kCodeCentre, AnchorRule::kValueCentre}) {
              for (bool exact : {true, false}) {
                ref.anchor_rule = impl.anchor_rule = rule;
                ref.exact_extremes = impl.exact_extremes = exact;
                // Same float ops in every implementation: decoded values are equal (+0 == -0).
                const std::vector<float> x = Decode(*a, stages, ref);
                const std::vector<float> y = Decode(*a, stages, impl);
                for (size_t i = 0; i < x.size(); ++i) {
                  ASSERT_EQ(x[i], y[i]) << "value " << i << " stages " << stages << " exact extremes " << exact;
                }
              }
            }
          }
        }
      }
    }
  }
}

// A daemon encodes into pooled buffers that hold an earlier request's bytes: the container must be the same
// whatever the memory held, so the encoders write every byte of it.
TEST_P(CodecImplTest, EncodingIntoUsedMemoryWritesEveryByteOfTheContainer) {
  std::vector<TestPage> pages = AdversarialPages();
  pages.push_back(RealisticPage(256, 1024, 2));
  pages.push_back(RealisticPage(64, 77, 3));
  pages.push_back(RealisticPage(12, 208, 4));  // shorter than one chunk
  for (const std::string& name : AllSchemeNames()) {
    for (const TestPage& page : pages) {
      SCOPED_TRACE(name + " on " + page.name);
      CodecOptions o;
      o.impl = GetParam();
      absl::StatusOr<EncodedPage> ref = EncodePage(MustParse(name), o, page.view());
      ASSERT_TRUE(ref.ok()) << ref.status();
      for (uint8_t poison : {0x00, 0xFF, 0x5A}) {
        std::vector<uint8_t> out(ref->bytes.size() + 3, poison);
        absl::StatusOr<ContainerLayout> l = EncodePageInto(MustParse(name), o, page.view(), absl::MakeSpan(out));
        ASSERT_TRUE(l.ok()) << l.status();
        ASSERT_TRUE(std::equal(ref->bytes.begin(), ref->bytes.end(), out.begin())) << "poison " << int{poison};
        EXPECT_EQ(out.back(), poison) << "wrote past the container";
        EXPECT_EQ(l->stream_crc, ref->layout.stream_crc);
      }
      std::vector<uint8_t> small(ref->bytes.size() - 1);
      EXPECT_EQ(EncodePageInto(MustParse(name), o, page.view(), absl::MakeSpan(small)).status().code(),
                absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST_P(CodecImplTest, AdversarialPagesDecodeToFiniteValuesInsideTheirChannelRange) {
  for (const TestPage& page : AdversarialPages()) {
    for (const std::string& name : AllSchemeNames()) {
      SCOPED_TRACE(name + " on " + page.name);
      const Scheme scheme = MustParse(name);
      absl::StatusOr<EncodedPage> enc = EncodePage(scheme, Options(), page.view());
      ASSERT_TRUE(enc.ok()) << enc.status();
      for (int stages = 1; stages <= scheme.num_streams(); ++stages) {
        const std::vector<float> out = Decode(*enc, stages, Options());
        for (int c = 0; c < page.channels; ++c) {
          float lo = std::numeric_limits<float>::infinity(), hi = -lo;
          for (int t = 0; t < page.tokens; ++t) {
            lo = std::fmin(lo, page.data[t * page.channels + c]);
            hi = std::fmax(hi, page.data[t * page.channels + c]);
          }
          for (int t = 0; t < page.tokens; ++t) {
            const float y = out[t * page.channels + c];
            ASSERT_TRUE(std::isfinite(y)) << "(" << t << ", " << c << ")";
            if (scheme.kind == SchemeKind::kLynx) {
              ASSERT_GE(y, lo) << "(" << t << ", " << c << ")";
              ASSERT_LE(y, hi) << "(" << t << ", " << c << ")";
            }
          }
        }
      }
    }
  }
}

TEST_P(CodecImplTest, LynxDecodesConstantChannelsAndZerosExactly) {
  for (const char* page_name : {"constant_channels", "all_zero", "signed_zeros"}) {
    for (const TestPage& page : AdversarialPages()) {
      if (page.name != page_name) continue;
      for (const char* name : {"lynx", "lynx-a2r2r4", "lynx4", "lynx+spike"}) {
        SCOPED_TRACE(std::string(name) + " on " + page.name);
        absl::StatusOr<EncodedPage> enc = EncodePage(MustParse(name), Options(), page.view());
        ASSERT_TRUE(enc.ok()) << enc.status();
        for (int stages = 1; stages <= enc->layout.scheme.num_streams(); ++stages) {
          EXPECT_EQ(Decode(*enc, stages, Options()), page.data);
        }
      }
    }
  }
}

TEST_P(CodecImplTest, SplitLynxSchemesAtFullPrecisionEqualTheSingleStreamLynx8) {
  const TestPage page = RealisticPage(128, 256, 4);
  absl::StatusOr<EncodedPage> single = EncodePage(MustParse("lynx8"), Options(), page.view());
  ASSERT_TRUE(single.ok());
  const std::vector<float> want = Decode(*single, 1, Options());
  for (const char* name : {"lynx", "lynx-a2r6", "lynx-a3r5", "lynx-a2r2r4", "lynx-a1r7"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<EncodedPage> split = EncodePage(MustParse(name), Options(), page.view());
    ASSERT_TRUE(split.ok());
    EXPECT_EQ(Decode(*split, split->layout.scheme.num_streams(), Options()), want);
  }
}

TEST_P(CodecImplTest, EachRefinementStageReducesTheError) {
  const TestPage page = RealisticPage(256, 256, 5);
  absl::StatusOr<EncodedPage> enc = EncodePage(MustParse("lynx-a2r2r4"), Options(), page.view());
  ASSERT_TRUE(enc.ok());
  const double e1 = Nmse(page.data, Decode(*enc, 1, Options()));
  const double e2 = Nmse(page.data, Decode(*enc, 2, Options()));
  const double e3 = Nmse(page.data, Decode(*enc, 3, Options()));
  EXPECT_GT(e1, 2 * e2);
  EXPECT_GT(e2, 2 * e3);
}

TEST_P(CodecImplTest, AnchorOnlyDecodeNeedsOnlyTheAnchorStreamBytes) {
  const TestPage page = RealisticPage(64, 128, 6);
  absl::StatusOr<EncodedPage> enc = EncodePage(MustParse("lynx"), Options(), page.view());
  ASSERT_TRUE(enc.ok());
  const absl::Span<const uint8_t> anchor = enc->stream(0);
  ASSERT_EQ(anchor.data(), enc->bytes.data());
  std::vector<float> from_prefix(page.data.size()), from_whole(page.data.size());
  ASSERT_TRUE(DecodePage(anchor, 1, MutablePageView{from_prefix.data(), 64, 128, 0}, Options()).ok());
  ASSERT_TRUE(DecodePage(enc->bytes, 1, MutablePageView{from_whole.data(), 64, 128, 0}, Options()).ok());
  EXPECT_EQ(from_prefix, from_whole);
  // The residual is not there yet: asking for it is an error, not a read past the end.
  EXPECT_EQ(DecodePage(anchor, 2, MutablePageView{from_prefix.data(), 64, 128, 0}, Options()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(CodecImplTest, NonFiniteInputIsRejectedNamingTheTokenAndChannel) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    TestPage page = RealisticPage(64, 40, 7);
    page.data[37 * 40 + 21] = bad;
    page.data[50 * 40 + 3] = bad;
    for (const std::string& name : AllSchemeNames()) {
      absl::StatusOr<EncodedPage> enc = EncodePage(MustParse(name), Options(), page.view());
      ASSERT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument) << name;
      EXPECT_THAT(enc.status().message(), HasSubstr("(token 37, channel 21)"));
    }
  }
}

TEST_P(CodecImplTest, StridedPagesEncodeLikeDensePages) {
  const TestPage page = RealisticPage(32, 48, 8);
  std::vector<float> strided(32 * 64, std::numeric_limits<float>::quiet_NaN());  // padding must not be read
  for (int t = 0; t < 32; ++t) std::memcpy(&strided[t * 64], &page.data[t * 48], 48 * sizeof(float));
  for (const std::string& name : AllSchemeNames()) {
    absl::StatusOr<EncodedPage> a = EncodePage(MustParse(name), Options(), page.view());
    absl::StatusOr<EncodedPage> b = EncodePage(MustParse(name), Options(), PageView{strided.data(), 32, 48, 64});
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(a->bytes, b->bytes) << name;
    std::vector<float> out(32 * 64, 7.0f);
    ASSERT_TRUE(DecodePage(a->bytes, 1, MutablePageView{out.data(), 32, 48, 64}, Options()).ok());
    EXPECT_EQ(out[48], 7.0f) << "decode wrote into the row padding";
  }
}

TEST_P(CodecImplTest, EveryKneeWidthEncodesAsTheReferenceAndDecodesWithTheContainersCurve) {
  const TestPage page = RealisticPage(256, 128, 21);
  for (const char* name : {"lynx", "lynx8", "lynx-a2r2r4"}) {
    std::vector<float> previous_full;
    for (float w : {0.0f, kMinTopWidth, 0.05f, kMaxTopWidth}) {
      CodecOptions o = Options();
      o.top_width = w;
      CodecOptions ref = o;
      ref.impl = CodecImpl::kReference;
      absl::StatusOr<EncodedPage> got = EncodePage(MustParse(name), o, page.view());
      absl::StatusOr<EncodedPage> want = EncodePage(MustParse(name), ref, page.view());
      ASSERT_TRUE(got.ok() && want.ok()) << name << " " << w;
      EXPECT_EQ(got->bytes, want->bytes) << name << " " << w;
      EXPECT_EQ(got->layout.top_width, w);
      // The decoder takes the curve from the container, whatever its own options say.
      const int stages = got->layout.scheme.num_streams();
      CodecOptions other = Options();
      other.top_width = w == 0.0f ? CodecOptions{}.top_width : 0.0f;
      const std::vector<float> full = Decode(*got, stages, o);
      EXPECT_EQ(Decode(*got, stages, other), full) << name << " " << w;
      EXPECT_EQ(Decode(*got, 1, other), Decode(*got, 1, o)) << name << " " << w;
      EXPECT_LT(Nmse(page.data, full), 1e-4) << name << " " << w;
      EXPECT_NE(full, previous_full) << name << " " << w << ": the width changed no value";
      previous_full = full;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllImpls, CodecImplTest,
                         ::testing::Values(CodecImpl::kReference, CodecImpl::kAvx2, CodecImpl::kAvx512),
                         [](const auto& info) { return std::string(ImplName(info.param)); });

TEST(CodecBitsTest, LynxFitsInsideInt8AndItsAnchorInsideInt4BitsPerValueOnKvtdsPages) {
  // kvtd's page for Llama-8B's 1024 channels (AutoPageTokens): lynx's per-page-channel metadata (the frame and
  // its spikes) is paid over 2048 tokens.
  const TestPage page = RealisticPage(AutoPageTokens(1024), 1024, 9);
  ASSERT_EQ(page.view().tokens, 2048);
  auto bits = [&](const std::string& name, int stages) {
    absl::StatusOr<EncodedPage> enc = EncodePage(MustParse(name), CodecOptions{}, page.view());
    EXPECT_TRUE(enc.ok());
    size_t bytes = 0;
    for (int i = 0; i < stages; ++i) bytes += enc->layout.stream_length[i];
    return 8.0 * bytes / page.data.size();
  };
  const double int8 = bits("int8", 1), int4 = bits("int4", 1);
  EXPECT_NEAR(int8, 9.0, 0.01);
  EXPECT_NEAR(int4, 5.0, 0.01);
  EXPECT_LE(bits("lynx", 2), 8.98);  // issue 35's budget: lynx full <= 8.98, its anchor <= 4.98 bits a value
  EXPECT_LE(bits("lynx", 1), 4.98);
  EXPECT_LE(bits("lynx-a3r5", 2), int8);
  EXPECT_LE(bits("lynx-a2r2r4", 3), int8);
  EXPECT_LE(bits("lynx8", 1), int8);
  EXPECT_LE(bits("lynx4", 1), int4);
  // docs/FORMAT.md's table: 104 header + 8192 lo/hi + 229376 14-bit end pairs (128 chunks x 1024 channels) +
  // 18432 frame spikes (3 x 1024 x 6 bytes) + 32 anchor table + codes.
  const double meta = 104 + 8192 + 229376 + 18432 + 32;
  EXPECT_NEAR(bits("lynx", 2), 8.0 * (meta + 2048 * 1024) / (2048 * 1024), 1e-9);
  EXPECT_NEAR(bits("lynx", 1), 8.0 * (meta + 1024 * 1024) / (2048 * 1024), 1e-9);
}

TEST(CodecArgumentsTest, BadPagesAndOptionsAreInvalidArguments) {
  const TestPage page = RealisticPage(64, 16, 10);
  const Scheme lynx = MustParse("lynx");
  CodecOptions bad_chunk;
  for (int chunk : {-1, 257}) {
    bad_chunk.chunk_tokens = chunk;
    EXPECT_EQ(EncodePage(lynx, bad_chunk, page.view()).status().code(), absl::StatusCode::kInvalidArgument);
  }
  bad_chunk.chunk_tokens = 24;  // 64 tokens are no whole number of 24-token chunks
  EXPECT_EQ(EncodePage(lynx, bad_chunk, page.view()).status().code(), absl::StatusCode::kInvalidArgument);
  CodecOptions bad_alpha;
  bad_alpha.alpha = -1.0f;
  EXPECT_EQ(EncodePage(lynx, bad_alpha, page.view()).status().code(), absl::StatusCode::kInvalidArgument);
  bad_alpha.alpha = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(EncodePage(lynx, bad_alpha, page.view()).status().code(), absl::StatusCode::kInvalidArgument);
  // top_width: 0 or [kMinTopWidth, kMaxTopWidth]; -0 too is refused (the header keeps the bits it is given).
  for (float w : {-0.0f, -0.05f, 0.01f, 0.13f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    CodecOptions bad_width;
    bad_width.top_width = w;
    const absl::Status st = EncodePage(lynx, bad_width, page.view()).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << w;
    EXPECT_NE(st.message().find("top_width"), std::string::npos) << st;
  }
  CodecOptions chunk_24;
  chunk_24.chunk_tokens = 24;  // 64 tokens is not a whole number of 24-token chunks
  EXPECT_EQ(EncodePage(lynx, chunk_24, page.view()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePage(lynx, {}, PageView{nullptr, 64, 16, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePage(lynx, {}, PageView{page.data.data(), 0, 16, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePage(lynx, {}, PageView{page.data.data(), 64, 16, 8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Scheme wrong = lynx;
  wrong.stage_bits = {4, 5};
  EXPECT_EQ(EncodePage(wrong, {}, page.view()).status().code(), absl::StatusCode::kInvalidArgument);
  Scheme int8_spike = MustParse("int8");
  int8_spike.spike_reserve = true;
  EXPECT_EQ(EncodePage(int8_spike, {}, page.view()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CodecArgumentsTest, DecodeRejectsStagesOutOfRangeAndMismatchedOutputs) {
  const TestPage page = RealisticPage(64, 16, 11);
  absl::StatusOr<EncodedPage> enc = EncodePage(MustParse("lynx"), CodecOptions{}, page.view());
  ASSERT_TRUE(enc.ok());
  std::vector<float> out(64 * 16);
  EXPECT_EQ(DecodePage(enc->bytes, 0, MutablePageView{out.data(), 64, 16, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePage(enc->bytes, 3, MutablePageView{out.data(), 64, 16, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePage(enc->bytes, 2, MutablePageView{out.data(), 32, 16, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePage(enc->bytes, 2, MutablePageView{out.data(), 64, 15, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePage(enc->bytes, 2, MutablePageView{nullptr, 64, 16, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(DecodePage(enc->bytes, 2, MutablePageView{out.data(), 64, 16, 0}).ok());
}

}  // namespace
}  // namespace kvt::codec
