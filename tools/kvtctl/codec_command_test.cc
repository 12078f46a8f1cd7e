#include "tools/kvtctl/codec_command.h"

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "codec/eval/npy.h"
#include "codec/eval/synthetic_kv.h"
#include "codec/eval/tensor_codec.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/kvtctl/kvtctl.h"

namespace kvt::kvtctl {
namespace {

using codec::eval::NpyArray;
using codec::eval::NpyDtype;

struct CliResult {
  int code;
  std::string out, err;
};

CliResult Kvtctl(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = RunKvtctl(args, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

std::string TempPath(const std::string& name) { return std::string(testing::TempDir()) + "/" + name; }

NpyArray RandomKv(std::vector<int64_t> shape, uint32_t seed) {
  NpyArray a;
  a.shape = std::move(shape);
  a.data.resize(a.num_values());
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  for (float& v : a.data) v = d(gen);
  return a;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<std::string> kTinyEval = {"codec", "eval", "--model=tiny", "--tokens=64", "--layers=1",
                                            "--schemes=int8,lynx-a2r2r4"};

TEST(CodecCommandTest, EvalPrintsOneRowPerSchemeAndStageAndProgressOnStderr) {
  const CliResult r = Kvtctl(kTinyEval);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("bits/val"), std::string::npos);
  EXPECT_NE(r.out.find("attn vNMSE"), std::string::npos);
  EXPECT_NE(r.out.find("layers evaluated: 0 (1 of 4)"), std::string::npos) << r.out;
  int lynx_rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) lynx_rows += line.rfind("lynx-a2r2r4 ", 0) == 0;
  EXPECT_EQ(lynx_rows, 3);
  EXPECT_NE(r.err.find("layer 0 (1/1): lynx-a2r2r4"), std::string::npos) << r.err;
}

TEST(CodecCommandTest, EvalJsonHasTheDocumentedFields) {
  std::vector<std::string> args = kTinyEval;
  args.push_back("--json");
  args.push_back("--noprogress");
  const CliResult r = Kvtctl(args);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"source", "layers_evaluated", "total_layers", "tokens", "kv_heads", "head_dim",
                          "query_heads", "queries_per_head", "page_tokens", "values_per_scheme", "codec_options",
                          "seconds", "schemes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  ASSERT_EQ(j["schemes"].size(), 2u);
  const auto& lynx = j["schemes"][1];
  EXPECT_EQ(lynx["scheme"], "lynx-a2r2r4");
  ASSERT_EQ(lynx["stages"].size(), 3u);
  EXPECT_EQ(lynx["stages"][0]["label"], "0");
  EXPECT_EQ(lynx["stages"][2]["label"], "full");
  for (const char* key : {"stage", "full", "bits_per_value", "stream_bits_per_value", "kv_nmse", "k_nmse",
                          "v_nmse", "attention_vnmse", "decode_values_per_s"}) {
    EXPECT_TRUE(lynx["stages"][0].contains(key)) << key;
  }
  EXPECT_GT(lynx["stages"][0]["attention_vnmse"].get<double>(), lynx["stages"][2]["attention_vnmse"].get<double>());
}

TEST(CodecCommandTest, EvalAttributeAddsKOnlyAndVOnlyColumnsAndFields) {
  std::vector<std::string> args = kTinyEval;
  args.push_back("--attribute");
  args.push_back("--noprogress");
  CliResult r = Kvtctl(args);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("vNMSE K"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vNMSE V"), std::string::npos) << r.out;
  EXPECT_EQ(Kvtctl(kTinyEval).out.find("vNMSE K"), std::string::npos) << "only with --attribute";
  args.push_back("--json");
  r = Kvtctl(args);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const nlohmann::json stage = nlohmann::json::parse(r.out)["schemes"][1]["stages"][0];
  EXPECT_GT(stage["attention_vnmse_k_only"].get<double>(), 0.0);
  EXPECT_GT(stage["attention_vnmse_v_only"].get<double>(), 0.0);
}

// Each stage's attention error per evaluated layer, whose average is the stage's figure (every layer has as many
// queries), with and without K or V alone.
TEST(CodecCommandTest, EvalJsonHasEachLayersAttentionErrorAveragingToTheStagesOwn) {
  const CliResult r = Kvtctl({"codec", "eval", "--model=tiny", "--tokens=64", "--layers=3", "--schemes=int8,lynx",
                              "--attribute", "--noprogress", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["layers_evaluated"].size(), 3u);
  for (const nlohmann::json& scheme : doc["schemes"]) {
    for (const nlohmann::json& stage : scheme["stages"]) {
      for (const std::string field : {"attention_vnmse", "attention_vnmse_k_only", "attention_vnmse_v_only"}) {
        const nlohmann::json& per_layer = stage[field + "_per_layer"];
        ASSERT_EQ(per_layer.size(), 3u) << field;
        double sum = 0;
        for (const nlohmann::json& x : per_layer) {
          EXPECT_GT(x.get<double>(), 0.0) << field;
          sum += x.get<double>();
        }
        EXPECT_NEAR(sum / 3, stage[field].get<double>(), 1e-9 * stage[field].get<double>()) << field;
      }
    }
  }
}

TEST(CodecCommandTest, EvalUsageErrorsExitTwoAndSayWhatToDo) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"codec", "eval", "--modle=tiny"}, "unknown flag '--modle'"},
      {{"codec", "eval", "--schemes=int9"}, "int9"},
      {{"codec", "eval", "--model=gpt"}, "presets"},
      {{"codec", "eval", "--tokens=many"}, "bad value 'many'"},
      {{"codec", "eval", "--in=x.npy", "--model=tiny"}, "drop --model"},
      {{"codec", "eval", "--centering=median"}, "midrange or mean"},
      {{"codec", "eval", "--alpha=0"}, "alpha"},
      {{"codec", "eval", "stray"}, "unexpected argument 'stray'"},
      {{"codec"}, "eval, roundtrip, sweep or synth"},
      {{"codec", "compress"}, "unknown subcommand 'compress'"},
  };
  for (const Case& c : cases) {
    const CliResult r = Kvtctl(c.args);
    EXPECT_EQ(r.code, kExitUsage) << c.args.back();
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
}

TEST(CodecCommandTest, EvalOfAMissingFileFailsWithExitOne) {
  const CliResult r = Kvtctl({"codec", "eval", "--in", TempPath("does_not_exist.npy")});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
}

TEST(CodecCommandTest, EvalReadsAFiveDimensionalDump) {
  const std::string path = TempPath("eval_dump.npy");
  ASSERT_TRUE(codec::eval::WriteNpyFile(path, RandomKv({2, 2, 96, 2, 16}, 5), NpyDtype::kFloat16).ok());
  const CliResult r = Kvtctl({"codec", "eval", "--in", path, "--schemes=int4", "--json", "--noprogress"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], 96);
  EXPECT_EQ(j["kv_heads"], 2);
  EXPECT_EQ(j["total_layers"], 2);
  EXPECT_TRUE(j["schemes"][0]["stages"][0]["attention_vnmse"].is_number());
}

TEST(CodecCommandTest, RoundTripWritesFloat32StagesOfTheInputShapeAndFullIsTheCodecDecode) {
  const std::string in = TempPath("rt_in.npy"), prefix = TempPath("rt_out");
  const NpyArray x = RandomKv({2, 2, 300, 2, 8}, 1);
  ASSERT_TRUE(codec::eval::WriteNpyFile(in, x, NpyDtype::kFloat16).ok());
  const CliResult r = Kvtctl({"codec", "roundtrip", "--scheme=lynx", "--in", in, "--out-prefix", prefix});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find(prefix + ".stage0.npy"), std::string::npos) << r.out;
  auto stage0 = codec::eval::ReadNpyFile(prefix + ".stage0.npy");
  auto full = codec::eval::ReadNpyFile(prefix + ".full.npy");
  ASSERT_TRUE(stage0.ok()) << stage0.status();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_FALSE(codec::eval::ReadNpyFile(prefix + ".stage1.npy").ok()) << "lynx has one partial stage";
  EXPECT_EQ(stage0->shape, x.shape);
  EXPECT_EQ(full->shape, x.shape);
  EXPECT_EQ(stage0->source_dtype, NpyDtype::kFloat32);
  EXPECT_EQ(full->source_dtype, NpyDtype::kFloat32);
  EXPECT_NE(FileBytes(prefix + ".full.npy").find("'<f4'"), std::string::npos);
  EXPECT_NE(stage0->data, full->data);
  // The full decode is the codec's decode of the (float16-widened) input, page by page: check layer 0's K.
  auto widened = codec::eval::ReadNpyFile(in);
  ASSERT_TRUE(widened.ok());
  auto enc = codec::eval::EncodeTensor(*codec::ParseScheme("lynx"), codec::CodecOptions{},
                                       codec::eval::TensorView{widened->data.data(), 300, 16});
  ASSERT_TRUE(enc.ok());
  std::vector<float> want(300 * 16);
  ASSERT_TRUE(codec::eval::DecodeTensor(*enc, 2, codec::CodecOptions{}, want.data()).ok());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(full->data[i], want[i]) << i;
}

TEST(CodecCommandTest, RoundTripWritesEveryPartialStageOfMultiStageSchemes) {
  const std::string in = TempPath("rt2_in.npy"), prefix = TempPath("rt2_out");
  ASSERT_TRUE(codec::eval::WriteNpyFile(in, RandomKv({64, 12}, 2)).ok());
  const CliResult r = Kvtctl({"codec", "roundtrip", "--scheme=lynx-a2r2r4", "--in", in, "--out-prefix", prefix});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* suffix : {".stage0.npy", ".stage1.npy", ".full.npy"}) {
    auto a = codec::eval::ReadNpyFile(prefix + suffix);
    ASSERT_TRUE(a.ok()) << suffix;
    EXPECT_EQ(a->shape, (std::vector<int64_t>{64, 12}));
  }
  const CliResult single = Kvtctl({"codec", "roundtrip", "--scheme=int8", "--in", in, "--out-prefix", prefix + "_i8"});
  ASSERT_EQ(single.code, kExitOk) << single.err;
  EXPECT_TRUE(codec::eval::ReadNpyFile(prefix + "_i8.full.npy").ok());
  EXPECT_FALSE(codec::eval::ReadNpyFile(prefix + "_i8.stage0.npy").ok());
}

TEST(CodecCommandTest, RoundTripErrorsSayWhatIsWrong) {
  const std::string in = TempPath("rt3_in.npy");
  ASSERT_TRUE(codec::eval::WriteNpyFile(in, RandomKv({2, 3, 4}, 3)).ok());
  CliResult r = Kvtctl({"codec", "roundtrip", "--in", in});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("required"), std::string::npos);
  r = Kvtctl({"codec", "roundtrip", "--scheme=lynx9", "--in", in, "--out-prefix", TempPath("x")});
  EXPECT_EQ(r.code, kExitUsage);
  r = Kvtctl({"codec", "roundtrip", "--scheme=lynx", "--in", in, "--out-prefix", TempPath("x")});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("[T, C]"), std::string::npos) << r.err;
  r = Kvtctl({"codec", "roundtrip", "--scheme=lynx", "--in", TempPath("missing.npy"), "--out-prefix", TempPath("x")});
  EXPECT_EQ(r.code, kExitFailure);
  std::ofstream(TempPath("garbage.npy")) << "not an npy file";
  r = Kvtctl({"codec", "roundtrip", "--scheme=lynx", "--in", TempPath("garbage.npy"), "--out-prefix", TempPath("x")});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("magic"), std::string::npos) << r.err;
}

TEST(CodecCommandTest, RoundTripReadsABf16SafetensorsTensor) {
  // One tensor "kv" of shape [1, 2, 64, 1, 4], BF16 (each value the high half of a float).
  const NpyArray x = RandomKv({1, 2, 64, 1, 4}, 9);
  std::string data;
  for (float f : x.data) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    data.push_back(static_cast<char>((u >> 16) & 0xFF));
    data.push_back(static_cast<char>(u >> 24));
  }
  const std::string header = absl::StrCat(R"({"kv": {"dtype": "BF16", "shape": [1, 2, 64, 1, 4], "data_offsets": [0, )",
                                          data.size(), "]}}");
  ASSERT_LT(header.size(), 256u);
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header + data;
  const std::string in = TempPath("rt_st.safetensors"), prefix = TempPath("rt_st");
  std::ofstream(in, std::ios::binary) << file;
  const CliResult r = Kvtctl({"codec", "roundtrip", "--scheme=int8", "--in", in, "--out-prefix", prefix});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("bfloat16"), std::string::npos) << r.out;
  auto full = codec::eval::ReadNpyFile(prefix + ".full.npy");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->shape, x.shape);
  EXPECT_EQ(Kvtctl({"codec", "roundtrip", "--scheme=int8", "--in", in, "--tensor=k", "--out-prefix", prefix}).code,
            kExitFailure);
  const CliResult npy_tensor = Kvtctl({"codec", "eval", "--in", TempPath("rt_in.npy"), "--tensor=kv"});
  EXPECT_EQ(npy_tensor.code, kExitUsage);
  EXPECT_NE(npy_tensor.err.find("--tensor names a tensor of a .safetensors"), std::string::npos) << npy_tensor.err;
}

TEST(CodecCommandTest, SweepPrintsEveryConfigurationBesideTheBaselines) {
  const CliResult r = Kvtctl({"codec", "sweep", "--model=tiny", "--tokens=64", "--layers=1", "--bulks=laplace,student-t",
                        "--alphas=1,8", "--top-widths=0,0.11", "--centerings=midrange", "--anchor-rules=code-centre",
                        "--noprogress"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("alpha=8 top=0 midrange code-centre"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alpha=8 top=0.11 midrange code-centre"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("int4"), std::string::npos);
  EXPECT_NE(r.out.find("student-t"), std::string::npos);
  const CliResult bad = Kvtctl({"codec", "sweep", "--alphas=1,x"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("bad alpha 'x'"), std::string::npos);
  const CliResult bad_width = Kvtctl({"codec", "sweep", "--top-widths=0.11,y"});
  EXPECT_EQ(bad_width.code, kExitUsage);
  EXPECT_NE(bad_width.err.find("bad top width 'y'"), std::string::npos) << bad_width.err;
  const CliResult wide = Kvtctl({"codec", "sweep", "--model=tiny", "--tokens=64", "--layers=1", "--bulks=laplace",
                                 "--alphas=1", "--top-widths=0.5", "--noprogress"});
  EXPECT_EQ(wide.code, kExitUsage);
  EXPECT_NE(wide.err.find("top_width"), std::string::npos) << wide.err;
}

TEST(CodecCommandTest, SynthWritesTheGeneratorsLayersAsAFiveDimensionalArray) {
  const std::string path = TempPath("synth.npy");
  const CliResult r = Kvtctl({"codec", "synth", "--model=tiny", "--tokens=40", "--layers=2", "--dtype=float16",
                              "--out", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  auto a = codec::eval::ReadNpyFile(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2, 40, 2, 16}));
  EXPECT_EQ(a->source_dtype, NpyDtype::kFloat16);
  auto o = codec::eval::SyntheticKvOptions::ForModel("tiny", 40);
  const codec::eval::LayerKv kv = codec::eval::GenerateLayer(*o, 1);
  const size_t n = 40 * 32;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a->data[3 * n + i], codec::eval::HalfToFloat(codec::eval::FloatToHalf(kv.v[i]))) << i;
  }
  EXPECT_EQ(Kvtctl({"codec", "synth", "--model=tiny"}).code, kExitUsage) << "--out is required";
  EXPECT_EQ(Kvtctl({"codec", "synth", "--out", path, "--dtype=int8"}).code, kExitUsage);
  EXPECT_EQ(Kvtctl({"codec", "synth", "--out", path, "--model=tiny", "--layers=5"}).code, kExitUsage);
}

TEST(CodecCommandTest, DemoWithoutAKvtdBinaryFailsSayingWhereItLooked) {
  const CliResult r = Kvtctl({"demo", "--kvtd=/nonexistent/kvtd", "--model=tiny", "--tokens=64"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("/nonexistent/kvtd"), std::string::npos) << r.err;
  EXPECT_EQ(Kvtctl({"demo", "--daemon=x"}).code, kExitUsage);
}

}  // namespace
}  // namespace kvt::kvtctl
