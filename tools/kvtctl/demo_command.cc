// `kvtctl demo` (codec-only for now); see demo_command.h.
#include "tools/kvtctl/demo_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codec/eval/evaluation.h"
#include "codec/eval/kv_source.h"
#include "codec/eval/synthetic_kv.h"
#include "tools/kvtctl/codec_command.h"
#include "tools/kvtctl/flag_set.h"

namespace kvt::kvtctl {
namespace {

int RunDemo(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "demo";
  FlagSet flags("kvtctl demo");
  std::string kvtd, model = "llama-3.1-8b";
  std::string schemes = absl::StrJoin(codec::StandardSchemeNames(), ",");
  int tokens = 2048, layers = 4;
  bool json = false;
  flags.String("kvtd", &kvtd, "path of the kvtd daemon (ignored: this is the codec-only demo)");
  flags.String("model", &model, "synthetic KV model preset");
  flags.Int("tokens", &tokens, "context length in tokens");
  flags.Int("layers", &layers, "layers evaluated, spread evenly over the depth");
  flags.String("schemes", &schemes, "comma-separated scheme names");
  flags.Bool("json", &json, "print one JSON document instead of the table");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, "Usage: kvtctl demo [--tokens N] [--layers L] [--json]")) {
    return *exit;
  }
  auto so = codec::eval::SyntheticKvOptions::ForModel(model, tokens);
  if (!so.ok()) return UsageError(io, cmd, std::string(so.status().message()), flags.Usage());
  auto source = codec::eval::MakeSyntheticSource(*so);
  if (!source.ok()) return UsageError(io, cmd, std::string(source.status().message()), flags.Usage());
  codec::eval::EvalOptions options;
  auto parsed = ParseSchemeList(schemes);
  if (!parsed.ok()) return UsageError(io, cmd, std::string(parsed.status().message()), flags.Usage());
  options.schemes = *std::move(parsed);
  options.max_layers = layers;
  if (absl::Status st = options.Validate(); !st.ok()) return UsageError(io, cmd, std::string(st.message()), flags.Usage());
  if (!json) {
    io.out << "kvt demo (codec-only): the kvtd daemons are not part of this demo yet, so it shows what the codec\n"
              "does to a KV cache: every scheme's bits on the wire and fidelity, per progressive stage.\n"
              "Same as `kvtctl codec eval`; see docs/CODEC.md and docs/BENCHMARKS.md.\n\n";
  }
  return RunEvaluationAndPrint(**source, options, json, /*progress=*/true, cmd, io);
}

}  // namespace

CommandGroup DemoCommandGroup() {
  return {"demo", "the codec-only demo: `kvtctl codec eval` on a Llama-3.1-8B-shaped synthetic KV cache", RunDemo};
}

}  // namespace kvt::kvtctl
