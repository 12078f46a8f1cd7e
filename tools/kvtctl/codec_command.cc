// `kvtctl codec eval | roundtrip | sweep`; see codec_command.h.
#include "tools/kvtctl/codec_command.h"

#include <chrono>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codec/eval/npy.h"
#include "codec/eval/roundtrip.h"
#include "codec/eval/safetensors.h"
#include "codec/eval/synthetic_kv.h"
#include "tools/kvtctl/codec_report.h"
#include "tools/kvtctl/flag_set.h"

namespace kvt::kvtctl {
namespace {

using codec::eval::EvalOptions;
using codec::eval::EvalReport;
using codec::eval::KvSource;
using codec::eval::NpyDtype;

constexpr char kCodecUsage[] =
    "Usage:\n"
    "  kvtctl codec eval [--model M --tokens N --layers L | --in FILE.npy] [--schemes a,b,...] [--json]\n"
    "      fidelity (bits/value, KV NMSE, attention vNMSE) and throughput per scheme and stage\n"
    "  kvtctl codec roundtrip --scheme S --in X.npy --out-prefix P\n"
    "      X: .npy float32/float16 or .safetensors (--tensor NAME) F32/F16/BF16, [T, C] or [L, 2, T, H, D]; writes P.stage0.npy (anchor only), P.stage1.npy, ...\n"
    "      and P.full.npy, float32, same shape (single-stream schemes: P.full.npy only)\n"
    "  kvtctl codec sweep [--bulks laplace,student-t] [--alphas ...] [--centerings ...] [--anchor-rules ...]\n"
    "      the sweep behind the lynx defaults (docs/CODEC.md), beside the int8/int4 baselines\n"
    "  kvtctl codec synth --out FILE.npy [--model M --tokens N --layers L --bulk B --seed S --dtype float16]\n"
    "      writes synthetic KV as [L, 2, T, H, D] (input for roundtrip, or for other tools)\n"
    "Run `kvtctl codec <subcommand> --help` for its flags.\n";

// Codec option flags shared by the subcommands; defaults are CodecOptions{}'s.
struct CodecFlags {
  double alpha = codec::CodecOptions{}.alpha;
  double top_width = codec::CodecOptions{}.top_width;
  std::string centering;
  std::string anchor_rule;
  std::string extremes;
  int chunk_tokens = codec::CodecOptions{}.chunk_tokens;
  int page_tokens = codec::eval::kDefaultPageTokens;

  void Register(FlagSet& flags) {
    flags.Double("alpha", &alpha, "lynx log-curve steepness");
    flags.Double("top-width", &top_width, "lynx curve knee: the share of the range the top eighth of the codes spans (0: none)");
    flags.String("centering", &centering, "lynx chunk centring: midrange | mean (empty: the codec default)");
    flags.String("anchor-rule", &anchor_rule,
                 "anchor-only reconstruction: conditional-mean | code-centre | value-centre (empty: the codec default)");
    flags.String("extremes", &extremes,
                 "partial decodes' single top-cell values: exact (at the chunk end) | table (empty: the codec default)");
    flags.Int("chunk-tokens", &chunk_tokens, "tokens per chunk (metadata granularity; 0: each scheme's own, lynx 16, int8/int4 32)");
    flags.Int("page-tokens", &page_tokens,
              "tokens per page (a multiple of --chunk-tokens; 0: kvtd's own choice, sized by the channels)");
  }
};

absl::StatusOr<codec::Centering> ParseCentering(absl::string_view s) {
  if (s == "midrange") return codec::Centering::kMidrange;
  if (s == "mean") return codec::Centering::kMean;
  return absl::InvalidArgumentError(absl::StrCat("unknown centering '", s, "'; use midrange or mean"));
}

absl::StatusOr<codec::AnchorRule> ParseAnchorRule(absl::string_view s) {
  if (s == "code-centre" || s == "code-center") return codec::AnchorRule::kCodeCentre;
  if (s == "value-centre" || s == "value-center") return codec::AnchorRule::kValueCentre;
  if (s == "conditional-mean") return codec::AnchorRule::kConditionalMean;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown anchor rule '", s, "'; use conditional-mean, code-centre or value-centre"));
}

// --extremes: whether a partial decode puts a chunk-channel's single top-cell value at the chunk end.
absl::StatusOr<bool> ParseExtremes(absl::string_view s) {
  if (s == "exact") return true;
  if (s == "table") return false;
  return absl::InvalidArgumentError(absl::StrCat("unknown extremes rule '", s, "'; use exact or table"));
}

absl::StatusOr<codec::CodecOptions> ToCodecOptions(const CodecFlags& f) {
  codec::CodecOptions o;
  o.alpha = static_cast<float>(f.alpha);
  o.top_width = static_cast<float>(f.top_width);
  o.chunk_tokens = f.chunk_tokens;
  if (!f.centering.empty()) {
    auto c = ParseCentering(f.centering);
    if (!c.ok()) return c.status();
    o.centering = *c;
  }
  if (!f.anchor_rule.empty()) {
    auto a = ParseAnchorRule(f.anchor_rule);
    if (!a.ok()) return a.status();
    o.anchor_rule = *a;
  }
  if (!f.extremes.empty()) {
    auto e = ParseExtremes(f.extremes);
    if (!e.ok()) return e.status();
    o.exact_extremes = *e;
  }
  if (auto st = o.Validate(); !st.ok()) return st;
  return o;
}

// A KV array from `path`: .safetensors (tensor `tensor`, or its only one) or .npy (`tensor` must be empty).
absl::StatusOr<codec::eval::NpyArray> LoadKvArray(const std::string& path, const std::string& tensor) {
  if (absl::EndsWith(path, ".safetensors")) return codec::eval::ReadSafetensorsFile(path, tensor);
  if (!tensor.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--tensor applies to .safetensors input, not '", path, "'"));
  }
  return codec::eval::ReadNpyFile(path);
}

std::vector<std::string> SplitList(const std::string& s) {
  return absl::StrSplit(s, ',', absl::SkipWhitespace());
}

// --- eval ---------------------------------------------------------------------------------------------------

struct EvalFlags {
  std::string model = "llama-3.1-8b";
  int tokens = 2048;
  int layers = 4;
  std::string in;
  std::string tensor;
  int gqa_group = 4;
  std::string bulk = "laplace";
  uint64_t seed = 1;
  std::string schemes = absl::StrJoin(codec::StandardSchemeNames(), ",");
  int queries = 8;
  bool attribute = false;
  bool json = false;
  bool progress = true;
  CodecFlags codec;

  void Register(FlagSet& flags) {
    flags.String("model", &model,
                 absl::StrCat("synthetic KV model preset: ", absl::StrJoin(codec::eval::ModelPresetNames(), ", ")));
    flags.Int("tokens", &tokens, "synthetic context length in tokens");
    flags.Int("layers", &layers,
              "layers evaluated, spread evenly over the depth (0 = all; compare schemes on all: a few layers swing "
              "the ratios by +-10%)");
    flags.String("in", &in,
                 "evaluate a KV dump (.npy or .safetensors) [L, 2, T, H, D] or [T, C] instead of synthetic KV");
    flags.String("tensor", &tensor, "the tensor of a .safetensors --in (needed if it holds several)");
    flags.Int("gqa-group", &gqa_group, "query heads per kv head for --in (attention probe)");
    flags.String("bulk", &bulk, "synthetic bulk distribution: laplace | student-t");
    flags.Uint64("seed", &seed, "seed of the synthetic KV and the attention queries");
    flags.String("schemes", &schemes, "comma-separated scheme names");
    flags.Int("queries", &queries, "sampled queries per query head and layer");
    flags.Bool("attribute", &attribute,
               "also score attention with only K decoded and with only V decoded (which tensor the error is from)");
    flags.Bool("json", &json, "print one JSON document instead of the table");
    flags.Bool("progress", &progress, "show progress on stderr");
    codec.Register(flags);
  }
};

absl::StatusOr<std::unique_ptr<KvSource>> MakeSource(const EvalFlags& f) {
  if (!f.in.empty()) {
    auto array = LoadKvArray(f.in, f.tensor);
    if (!array.ok()) return array.status();
    return codec::eval::MakeNpySource(*std::move(array), f.in, f.gqa_group);
  }
  auto o = codec::eval::SyntheticKvOptions::ForModel(f.model, f.tokens);
  if (!o.ok()) return o.status();
  auto bulk = codec::eval::ParseBulkDistribution(f.bulk);
  if (!bulk.ok()) return bulk.status();
  o->bulk = *bulk;
  o->seed = f.seed;
  return codec::eval::MakeSyntheticSource(*o);
}

int RunEval(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "codec eval";
  FlagSet flags("kvtctl codec eval");
  EvalFlags f;
  f.Register(flags);
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kCodecUsage)) return *exit;
  if (!f.tensor.empty() && !absl::EndsWith(f.in, ".safetensors")) {
    return UsageError(io, cmd, "--tensor names a tensor of a .safetensors --in", flags.Usage());
  }
  if (!f.in.empty() && (flags.WasSet("model") || flags.WasSet("tokens") || flags.WasSet("bulk"))) {
    return UsageError(io, cmd, "--in takes the KV from the file: drop --model, --tokens and --bulk",
                      flags.Usage());
  }
  EvalOptions options;
  auto schemes = ParseSchemeList(f.schemes);
  if (!schemes.ok()) return UsageError(io, cmd, std::string(schemes.status().message()), flags.Usage());
  options.schemes = *std::move(schemes);
  auto codec_options = ToCodecOptions(f.codec);
  if (!codec_options.ok()) return UsageError(io, cmd, std::string(codec_options.status().message()), flags.Usage());
  options.codec = *codec_options;
  options.page_tokens = f.codec.page_tokens;
  options.max_layers = f.layers;
  options.queries.queries_per_head = f.queries;
  options.queries.seed = f.seed;
  options.attribute_vnmse = f.attribute;
  if (absl::Status st = options.Validate(); !st.ok()) return UsageError(io, cmd, std::string(st.message()), flags.Usage());
  auto source = MakeSource(f);
  if (!source.ok()) {
    if (f.in.empty()) return UsageError(io, cmd, std::string(source.status().message()), flags.Usage());
    return Failure(io, cmd, source.status());
  }
  return RunEvaluationAndPrint(**source, options, f.json, f.progress, cmd, io);
}

// --- roundtrip ----------------------------------------------------------------------------------------------

int RunRoundTrip(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "codec roundtrip";
  FlagSet flags("kvtctl codec roundtrip");
  std::string scheme_name, in, out_prefix, tensor;
  CodecFlags cf;
  flags.String("scheme", &scheme_name, "the scheme (required), e.g. lynx, int8, lynx-a2r2r4");
  flags.String("in", &in,
               "input .npy (float32/float16) or .safetensors (F32/F16/BF16), [T, C] or [L, 2, T, H, D] (required)");
  flags.String("tensor", &tensor, "the tensor of a .safetensors --in (needed if it holds several)");
  flags.String("out-prefix", &out_prefix, "output prefix P: writes P.stage<i>.npy and P.full.npy (required)");
  cf.Register(flags);
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kCodecUsage)) return *exit;
  if (scheme_name.empty() || in.empty() || out_prefix.empty()) {
    return UsageError(io, cmd, "--scheme, --in and --out-prefix are all required", flags.Usage());
  }
  if (!tensor.empty() && !absl::EndsWith(in, ".safetensors")) {
    return UsageError(io, cmd, "--tensor names a tensor of a .safetensors --in", flags.Usage());
  }
  auto scheme = codec::ParseScheme(scheme_name);
  if (!scheme.ok()) return UsageError(io, cmd, std::string(scheme.status().message()), flags.Usage());
  auto options = ToCodecOptions(cf);
  if (!options.ok()) return UsageError(io, cmd, std::string(options.status().message()), flags.Usage());
  auto array = LoadKvArray(in, tensor);
  if (!array.ok()) return Failure(io, cmd, array.status());
  auto result = codec::eval::RoundTrip(*array, *scheme, *options, cf.page_tokens);
  if (!result.ok()) return Failure(io, cmd, absl::Status(result.status().code(),
                                                         absl::StrCat(in, ": ", result.status().message())));
  const std::vector<std::string> names = codec::eval::RoundTripFileNames(out_prefix, scheme->num_streams());
  const double values = static_cast<double>(array->num_values());
  io.out << absl::StrFormat("%s [%s] %s through %s (pages of %d tokens):\n", in, absl::StrJoin(array->shape, ", "),
                            numerics::DTypeName(array->source_dtype),
                            scheme->Name(), cf.page_tokens);
  double cumulative_bits = 0;
  for (size_t i = 0; i < result->stages.size(); ++i) {
    cumulative_bits += 8.0 * result->stream_bytes[i] / values;
    const std::string& name = names[i];  // one file per stage: stage<i> for partial decodes, full for the last
    if (absl::Status st = codec::eval::WriteNpyFile(name, result->stages[i]); !st.ok()) return Failure(io, cmd, st);
    io.out << absl::StrFormat("  %-40s streams 0..%d  %7.3f bits/value  NMSE %.3e\n", name, i, cumulative_bits,
                              codec::eval::Nmse(array->data, result->stages[i].data));
  }
  return kExitOk;
}

// --- sweep --------------------------------------------------------------------------------------------------

// A comma-separated list of numbers; false (with `error` set) on the first entry that is not one.
bool ParseNumberList(const std::string& list, const char* what, std::vector<double>& out, std::string& error) {
  for (const std::string& a : SplitList(list)) {
    double v;
    if (!absl::SimpleAtod(a, &v)) {
      error = absl::StrCat("bad ", what, " '", a, "'");
      return false;
    }
    out.push_back(v);
  }
  return true;
}

int RunSweep(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "codec sweep";
  FlagSet flags("kvtctl codec sweep");
  std::string model = "llama-3.1-8b", bulks = "laplace,student-t", alphas = "1,2,4,8,16,32,64,128";
  std::string centerings = "midrange,mean", anchor_rules = "conditional-mean,code-centre", extremes = "exact";
  std::string schemes = "lynx", baselines = "int8,int4";
  std::string top_widths = absl::StrCat(codec::CodecOptions{}.top_width);
  int tokens = 1024, layers = 2, queries = 8, chunk_tokens = codec::CodecOptions{}.chunk_tokens;
  uint64_t seed = 1;
  bool json = false, progress = true;
  flags.String("model", &model, "synthetic KV model preset");
  flags.Int("tokens", &tokens, "context length");
  flags.Int("layers", &layers, "layers evaluated per configuration (spread evenly)");
  flags.String("bulks", &bulks, "bulk distributions to sweep over: laplace, student-t");
  flags.String("alphas", &alphas, "alpha values");
  flags.String("top-widths", &top_widths, "lynx curve knee widths (0: none; see docs/CODEC.md \"Version 3\")");
  flags.String("centerings", &centerings, "centerings: midrange, mean");
  flags.String("anchor-rules", &anchor_rules, "anchor rules: conditional-mean, code-centre, value-centre");
  flags.String("extremes", &extremes, "partial decodes' single top-cell values: exact, table");
  flags.String("schemes", &schemes, "lynx-family schemes swept");
  flags.String("baselines", &baselines, "schemes evaluated once per data set for comparison");
  flags.Int("queries", &queries, "sampled queries per query head and layer");
  flags.Int("chunk-tokens", &chunk_tokens, "tokens per chunk (0: each scheme's own)");
  flags.Uint64("seed", &seed, "seed");
  flags.Bool("json", &json, "print one JSON document instead of the table");
  flags.Bool("progress", &progress, "show progress on stderr");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kCodecUsage)) return *exit;
  // Parse every list before running anything.
  std::vector<codec::eval::BulkDistribution> bulk_list;
  for (const std::string& b : SplitList(bulks)) {
    auto d = codec::eval::ParseBulkDistribution(b);
    if (!d.ok()) return UsageError(io, cmd, std::string(d.status().message()), flags.Usage());
    bulk_list.push_back(*d);
  }
  std::vector<double> alpha_list, width_list;
  std::string list_error;
  if (!ParseNumberList(alphas, "alpha", alpha_list, list_error) ||
      !ParseNumberList(top_widths, "top width", width_list, list_error)) {
    return UsageError(io, cmd, list_error, flags.Usage());
  }
  std::vector<codec::Centering> centering_list;
  for (const std::string& c : SplitList(centerings)) {
    auto v = ParseCentering(c);
    if (!v.ok()) return UsageError(io, cmd, std::string(v.status().message()), flags.Usage());
    centering_list.push_back(*v);
  }
  std::vector<codec::AnchorRule> rule_list;
  for (const std::string& r : SplitList(anchor_rules)) {
    auto v = ParseAnchorRule(r);
    if (!v.ok()) return UsageError(io, cmd, std::string(v.status().message()), flags.Usage());
    rule_list.push_back(*v);
  }
  std::vector<bool> extremes_list;
  for (const std::string& e : SplitList(extremes)) {
    auto v = ParseExtremes(e);
    if (!v.ok()) return UsageError(io, cmd, std::string(v.status().message()), flags.Usage());
    extremes_list.push_back(*v);
  }
  auto swept = ParseSchemeList(schemes);
  if (!swept.ok()) return UsageError(io, cmd, std::string(swept.status().message()), flags.Usage());
  auto base = ParseSchemeList(baselines);
  if (!base.ok()) return UsageError(io, cmd, std::string(base.status().message()), flags.Usage());
  if (bulk_list.empty() || alpha_list.empty() || width_list.empty() || centering_list.empty() || rule_list.empty() ||
      extremes_list.empty()) {
    return UsageError(io, cmd, "every swept list needs at least one value", flags.Usage());
  }

  struct Row {
    std::string data, scheme, config;
    codec::eval::StageResult stage;
  };
  std::vector<Row> rows;
  const auto start = std::chrono::steady_clock::now();
  const size_t total = bulk_list.size() * (1 + alpha_list.size() * width_list.size() * centering_list.size() *
                                                rule_list.size() * extremes_list.size());
  size_t done = 0;
  for (codec::eval::BulkDistribution bulk : bulk_list) {
    auto so = codec::eval::SyntheticKvOptions::ForModel(model, tokens);
    if (!so.ok()) return UsageError(io, cmd, std::string(so.status().message()), flags.Usage());
    so->bulk = bulk;
    so->seed = seed;
    auto source = codec::eval::MakeSyntheticSource(*so);
    if (!source.ok()) return UsageError(io, cmd, std::string(source.status().message()), flags.Usage());
    const std::string data = codec::eval::BulkDistributionName(bulk);
    // Each configuration is one evaluation; the baselines once per data set.
    auto run = [&](const std::vector<codec::Scheme>& s, const codec::CodecOptions& co,
                   const std::string& config) -> absl::Status {
      EvalOptions o;
      o.schemes = s;
      o.codec = co;
      o.max_layers = layers;
      o.queries.queries_per_head = queries;
      o.queries.seed = seed;
      if (progress) io.err << absl::StrFormat("[%d/%d] %s: %s\n", ++done, total, data, config) << std::flush;
      auto r = codec::eval::Evaluate(**source, o);
      if (!r.ok()) return r.status();
      for (const auto& sr : r->schemes) {
        for (const auto& st : sr.stages) rows.push_back({data, sr.scheme, config, st});
      }
      return absl::OkStatus();
    };
    codec::CodecOptions co;
    co.chunk_tokens = chunk_tokens;
    if (absl::Status st = run(*base, co, "baseline"); !st.ok()) return Failure(io, cmd, st);
    for (double alpha : alpha_list) {
      for (double width : width_list) {
        for (codec::Centering c : centering_list) {
          for (codec::AnchorRule r : rule_list) {
            for (bool exact : extremes_list) {
              co.alpha = static_cast<float>(alpha);
              co.top_width = static_cast<float>(width);
              co.centering = c;
              co.anchor_rule = r;
              co.exact_extremes = exact;
              if (absl::Status st = co.Validate(); !st.ok()) {
                return UsageError(io, cmd, std::string(st.message()), flags.Usage());
              }
              const std::string config = absl::StrFormat("alpha=%g top=%g %s %s %s", alpha, width, CenteringName(c),
                                                         AnchorRuleName(r), ExtremesName(exact));
              if (absl::Status st = run(*swept, co, config); !st.ok()) return Failure(io, cmd, st);
            }
          }
        }
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
      j.push_back({{"data", r.data},
                   {"scheme", r.scheme},
                   {"config", r.config},
                   {"stage", StageLabel(r.stage)},
                   {"bits_per_value", r.stage.bits_per_value},
                   {"kv_nmse", r.stage.kv_nmse},
                   {"attention_vnmse", r.stage.vnmse ? nlohmann::json(*r.stage.vnmse) : nlohmann::json(nullptr)}});
    }
    io.out << j.dump(2) << "\n";
    return kExitOk;
  }
  io.out << absl::StrFormat("sweep: synthetic %s, %d tokens, %d layers per configuration, %d queries per query "
                            "head, chunks of %d tokens\n\n",
                            model, tokens, layers, queries, chunk_tokens);
  io.out << absl::StrFormat("%-9s %-10s %-36s %-5s %9s %11s %11s\n", "data", "scheme", "configuration", "stage",
                            "bits/val", "KV NMSE", "attn vNMSE");
  for (const Row& r : rows) {
    io.out << absl::StrFormat("%-9s %-10s %-36s %-5s %9.3f %11.3e %11.3e\n", r.data, r.scheme, r.config,
                              StageLabel(r.stage), r.stage.bits_per_value, r.stage.kv_nmse,
                              r.stage.vnmse.value_or(NAN));
  }
  io.out << absl::StrFormat("\n%.1f s\n", seconds);
  return kExitOk;
}

// --- synth --------------------------------------------------------------------------------------------------

int RunSynth(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "codec synth";
  FlagSet flags("kvtctl codec synth");
  std::string out, model = "llama-3.1-8b", bulk = "laplace", dtype = "float32";
  int tokens = 2048, layers = 1;
  uint64_t seed = 1;
  flags.String("out", &out, "output .npy path (required)");
  flags.String("model", &model, "synthetic KV model preset");
  flags.Int("tokens", &tokens, "context length in tokens");
  flags.Int("layers", &layers, "the first this many layers (0 = all of the model's)");
  flags.String("bulk", &bulk, "bulk distribution: laplace | student-t");
  flags.Uint64("seed", &seed, "seed");
  flags.String("dtype", &dtype, "float32 | float16");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kCodecUsage)) return *exit;
  if (out.empty()) return UsageError(io, cmd, "--out is required", flags.Usage());
  if (dtype != "float32" && dtype != "float16") {
    return UsageError(io, cmd, absl::StrCat("unknown dtype '", dtype, "'; use float32 or float16"), flags.Usage());
  }
  auto o = codec::eval::SyntheticKvOptions::ForModel(model, tokens);
  if (!o.ok()) return UsageError(io, cmd, std::string(o.status().message()), flags.Usage());
  auto b = codec::eval::ParseBulkDistribution(bulk);
  if (!b.ok()) return UsageError(io, cmd, std::string(b.status().message()), flags.Usage());
  o->bulk = *b;
  o->seed = seed;
  if (layers < 0 || layers > o->model.layers) {
    return UsageError(io, cmd, absl::StrCat("--layers must be in [0, ", o->model.layers, "]"), flags.Usage());
  }
  const int n_layers = layers == 0 ? o->model.layers : layers;
  codec::eval::NpyArray array;
  array.shape = {n_layers, 2, tokens, o->model.kv_heads, o->model.head_dim};
  array.data.reserve(array.num_values());
  for (int l = 0; l < n_layers; ++l) {
    const codec::eval::LayerKv kv = codec::eval::GenerateLayer(*o, l);
    array.data.insert(array.data.end(), kv.k.begin(), kv.k.end());
    array.data.insert(array.data.end(), kv.v.begin(), kv.v.end());
  }
  const auto type = dtype == "float16" ? NpyDtype::kFloat16 : NpyDtype::kFloat32;
  if (absl::Status st = codec::eval::WriteNpyFile(out, array, type); !st.ok()) return Failure(io, cmd, st);
  io.out << absl::StrFormat("%s: [%s] %s, synthetic %s (%s bulk, seed %d)\n", out, absl::StrJoin(array.shape, ", "),
                            dtype, model, bulk, seed);
  return kExitOk;
}

int RunCodec(const std::vector<std::string>& args, const CommandIo& io) {
  if (args.empty()) return UsageError(io, "codec", "which subcommand? eval, roundtrip, sweep or synth", kCodecUsage);
  const std::string& sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "eval") return RunEval(rest, io);
  if (sub == "roundtrip") return RunRoundTrip(rest, io);
  if (sub == "sweep") return RunSweep(rest, io);
  if (sub == "synth") return RunSynth(rest, io);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    io.out << kCodecUsage;
    return kExitOk;
  }
  return UsageError(io, "codec", absl::StrCat("unknown subcommand '", sub, "'"), kCodecUsage);
}

}  // namespace

absl::StatusOr<std::vector<codec::Scheme>> ParseSchemeList(const std::string& names) {
  std::vector<codec::Scheme> schemes;
  for (const std::string& name : SplitList(names)) {
    auto s = codec::ParseScheme(name);
    if (!s.ok()) return s.status();
    schemes.push_back(*s);
  }
  if (schemes.empty()) return absl::InvalidArgumentError("--schemes lists no scheme");
  return schemes;
}

int RunEvaluationAndPrint(const KvSource& source, const EvalOptions& options, bool json, bool progress,
                          const std::string& command, const CommandIo& io) {
  const auto start = std::chrono::steady_clock::now();
  codec::eval::ProgressFn report_progress;
  if (progress) {
    report_progress = [&](absl::string_view line) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      io.err << absl::StrFormat("[%6.1fs] %s\n", t, line) << std::flush;
    };
  }
  auto report = codec::eval::Evaluate(source, options, report_progress);
  if (!report.ok()) return Failure(io, command, report.status());
  if (json) {
    io.out << EvalReportJson(*report).dump(2) << "\n";
  } else {
    io.out << FormatEvalTable(*report);
  }
  return kExitOk;
}

CommandGroup CodecCommandGroup() {
  return {"codec", "codec eval | roundtrip | sweep | synth: the codec's fidelity on synthetic or your own KV", RunCodec};
}

}  // namespace kvt::kvtctl
