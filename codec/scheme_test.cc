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
