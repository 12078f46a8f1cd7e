#include "codec/scheme.h"

#include "gtest/gtest.h"

namespace kvt::codec {
namespace {

TEST(SchemeTest, StandardNamesParseAndRoundTripThroughName) {
  for (const std::string& name : StandardSchemeNames()) {
    absl::StatusOr<Scheme> s = ParseScheme(name);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    EXPECT_EQ(s->Name(), name);
    EXPECT_EQ(*ParseScheme(s->Name()), *s);
  }
}

TEST(SchemeTest, LynxFormsCarryTheirStageWidths) {
  EXPECT_EQ(ParseScheme("lynx")->stage_bits, (std::vector<int>{4, 4}));
  EXPECT_EQ(ParseScheme("lynx-a3r5")->stage_bits, (std::vector<int>{3, 5}));
  EXPECT_EQ(ParseScheme("lynx-a2r2r4")->stage_bits, (std::vector<int>{2, 2, 4}));
  EXPECT_EQ(ParseScheme("lynx8")->stage_bits, (std::vector<int>{8}));
  EXPECT_EQ(ParseScheme("lynx4")->stage_bits, (std::vector<int>{4}));
  EXPECT_EQ(ParseScheme("lynx-a4r4")->Name(), "lynx");
  EXPECT_EQ(ParseScheme("lynx-a2r2r4")->num_streams(), 3);
  EXPECT_EQ(ParseScheme("lynx-a2r6")->total_code_bits(), 8);
}

TEST(SchemeTest, SpikeSuffixAppliesToTheLynxFamilyOnly) {
  absl::StatusOr<Scheme> s = ParseScheme("lynx-a2r6+spike");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->spike_reserve);
  EXPECT_EQ(s->Name(), "lynx-a2r6+spike");
  EXPECT_EQ(ParseScheme("int8+spike").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SchemeTest, LynxMetadataSuffixesParseInAnyOrderAndNameOnlyWhatDiffersFromTheDefaults) {
  const Scheme lynx = *ParseScheme("lynx");
  EXPECT_EQ(lynx.end_pair_bits, kDefaultEndPairBits);
  EXPECT_EQ(lynx.frame_spikes, kDefaultFrameSpikes);
  EXPECT_EQ(ParseScheme("lynx+e14+f3")->Name(), "lynx");
  const Scheme v3 = *ParseScheme("lynx8+f0+e23");
  EXPECT_EQ(v3.end_pair_bits, 23);
  EXPECT_EQ(v3.frame_spikes, 0);
  EXPECT_EQ(v3.Name(), "lynx8+e23+f0");
  EXPECT_EQ(*ParseScheme(v3.Name()), v3);
  const Scheme spike = *ParseScheme("lynx+spike");
  EXPECT_EQ(spike.frame_spikes, 0);  // one value a chunk instead
  EXPECT_EQ(spike.Name(), "lynx+spike");
  EXPECT_EQ(ParseScheme("lynx-a2r2r4+e8+f7")->Name(), "lynx-a2r2r4+e8+f7");
  EXPECT_EQ(ParseScheme("int8")->end_pair_bits, 0);
  EXPECT_EQ(ResolveChunkTokens(lynx, 0), kLynxChunkTokens);
  EXPECT_EQ(ResolveChunkTokens(*ParseScheme("int4"), 0), kUniformChunkTokens);
  EXPECT_EQ(ResolveChunkTokens(lynx, 32), 32);
  for (const char* bad : {"lynx+e7", "lynx+e24", "lynx+f8", "lynx+e14+e14", "lynx+spike+f3", "lynx+e014", "lynx+e",
                          "lynx+f-1", "lynx+e 14", "int8+e14", "lynx+x3", "lynx+spike+spike"}) {
    absl::StatusOr<Scheme> s = ParseScheme(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("valid schemes"), absl::string_view::npos) << bad;
  }
}

TEST(SchemeTest, MalformedNamesAreInvalidArgumentsListingTheValidForms) {
  for (const char* bad : {"", "lynx-a", "lynx-a4", "lynx-a5r4", "lynx-a0r8", "lynx-ar4", "lynx-a4r4x", "int2",
                          "lynx-a1r1r1r1r1r1r1r1r1", "lynx-a12r4", "bf16 "}) {
    absl::StatusOr<Scheme> s = ParseScheme(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("valid schemes"), absl::string_view::npos) << bad;
  }
}

}  // namespace
}  // namespace kvt::codec
