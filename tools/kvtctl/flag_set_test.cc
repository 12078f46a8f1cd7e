#include "tools/kvtctl/flag_set.h"

#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

struct Fixture {
  std::string model = "llama";
  int tokens = 2048;
  double alpha = 4;
  uint64_t seed = 1;
  bool json = false;
  FlagSet flags{"kvtctl test"};
  Fixture() {
    flags.String("model", &model, "model");
    flags.Int("tokens", &tokens, "tokens");
    flags.Double("alpha", &alpha, "alpha");
    flags.Uint64("seed", &seed, "seed");
    flags.Bool("json", &json, "json");
  }
};

TEST(FlagSetTest, ParsesEqualsAndSeparateValuesAndBooleans) {
  Fixture f;
  ASSERT_TRUE(f.flags.Parse({"--model=qwen", "--tokens", "512", "--alpha=0.5", "--json", "pos", "--seed=9"}).ok());
  EXPECT_EQ(f.model, "qwen");
  EXPECT_EQ(f.tokens, 512);
  EXPECT_EQ(f.alpha, 0.5);
  EXPECT_EQ(f.seed, 9u);
  EXPECT_TRUE(f.json);
  EXPECT_EQ(f.flags.positional(), std::vector<std::string>{"pos"});
  EXPECT_TRUE(f.flags.WasSet("tokens"));
}

TEST(FlagSetTest, DefaultsStayWhenFlagsAreAbsent) {
  Fixture f;
  ASSERT_TRUE(f.flags.Parse({}).ok());
  EXPECT_EQ(f.tokens, 2048);
  EXPECT_FALSE(f.flags.WasSet("tokens"));
}

TEST(FlagSetTest, BooleansAcceptExplicitValuesAndTheNoPrefix) {
  Fixture f;
  ASSERT_TRUE(f.flags.Parse({"--json=true"}).ok());
  EXPECT_TRUE(f.json);
  ASSERT_TRUE(f.flags.Parse({"--nojson"}).ok());
  EXPECT_FALSE(f.json);
  EXPECT_EQ(f.flags.Parse({"--json=maybe"}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FlagSetTest, UnderscoresAreAcceptedForDashes) {
  std::string prefix;
  FlagSet flags("kvtctl test");
  flags.String("out-prefix", &prefix, "prefix");
  ASSERT_TRUE(flags.Parse({"--out_prefix=/tmp/x"}).ok());
  EXPECT_EQ(prefix, "/tmp/x");
}

TEST(FlagSetTest, UnknownFlagsMissingAndMalformedValuesAreErrorsNamingTheFlag) {
  Fixture f;
  absl::Status st = f.flags.Parse({"--modle=x"});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--modle"), std::string::npos);
  st = f.flags.Parse({"--tokens"});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tokens"), std::string::npos);
  st = f.flags.Parse({"--tokens=lots"});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lots"), std::string::npos);
  EXPECT_EQ(f.flags.Parse({"--seed=-1"}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FlagSetTest, HelpIsRequestedNotAnErrorAndUsageListsDefaults) {
  Fixture f;
  ASSERT_TRUE(f.flags.Parse({"--help"}).ok());
  EXPECT_TRUE(f.flags.help_requested());
  const std::string usage = f.flags.Usage();
  EXPECT_NE(usage.find("--tokens"), std::string::npos);
  EXPECT_NE(usage.find("2048"), std::string::npos);
}

TEST(FlagSetTest, DoubleDashEndsFlags) {
  Fixture f;
  ASSERT_TRUE(f.flags.Parse({"--", "--json"}).ok());
  EXPECT_FALSE(f.json);
  EXPECT_EQ(f.flags.positional(), std::vector<std::string>{"--json"});
}

TEST(FlagSetTest, RepeatedFlagTakesOneValuePerOccurrenceInOrder) {
  std::vector<std::string> ids = {"default"};
  std::string model;
  FlagSet flags("kvtctl test");
  flags.Strings("request", &ids, "request");
  flags.String("model", &model, "model");
  ASSERT_TRUE(flags.Parse({"--request", "a", "pos", "--model=m", "--request=b", "--request", "c"}).ok());
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(flags.positional(), std::vector<std::string>{"pos"});
  EXPECT_TRUE(flags.WasSet("request"));
  EXPECT_NE(flags.Usage().find("[default]"), std::string::npos) << flags.Usage();
  ASSERT_TRUE(flags.Parse({"--model=n"}).ok());
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "c"})) << "a parse without the flag keeps its values";
  EXPECT_EQ(flags.Parse({"--request"}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FlagSetTest, AnEmptyValueAfterTheEqualsSignIsAnEmptyString) {
  Fixture f;
  ASSERT_TRUE(f.flags.Parse({"--model=", "--tokens", "5"}).ok());
  EXPECT_EQ(f.model, "");
  EXPECT_TRUE(f.flags.WasSet("model"));
  EXPECT_TRUE(f.flags.positional().empty());
  EXPECT_EQ(f.flags.Parse({"--tokens="}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::kvtctl
