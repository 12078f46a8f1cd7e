// `kvtctl codec ...`: the codec's fidelity evaluation, the roundtrip contract, the parameter sweep and a
// synthetic-KV writer.
//   kvtctl codec eval [--model M --tokens N --layers L | --in FILE.npy] [--schemes a,b,...] [--json]
//   kvtctl codec roundtrip --scheme S --in X.npy --out-prefix P
//   kvtctl codec sweep [--bulks laplace,student-t] [--alphas 1,4,16] [--centerings ...] [--anchor-rules ...]
//   kvtctl codec synth --out FILE.npy [--model M --tokens N --layers L]
// Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_CODEC_COMMAND_H_
#define KVT_TOOLS_KVTCTL_CODEC_COMMAND_H_

#include <string>
#include <vector>

#include "codec/eval/evaluation.h"
#include "codec/eval/kv_source.h"
#include "tools/kvtctl/command.h"

namespace kvt::kvtctl {

CommandGroup CodecCommandGroup();

// Runs the evaluation with progress on io.err and prints the table (or, with `json`, the JSON document) to
// io.out. Shared with `kvtctl demo`. Returns an exit code.
int RunEvaluationAndPrint(const codec::eval::KvSource& source, const codec::eval::EvalOptions& options, bool json,
                          bool progress, const std::string& command, const CommandIo& io);

// Parses a comma-separated list of scheme names; INVALID_ARGUMENT naming the bad one.
absl::StatusOr<std::vector<codec::Scheme>> ParseSchemeList(const std::string& names);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_CODEC_COMMAND_H_
