// The fidelity evaluation of docs/CODEC.md: runs every scheme over a KV source page by page and reports, per
// scheme and stage (stage 0 = anchor only, ..., the last = full), bits per value on the wire (container
// header and metadata included), KV NMSE, attention-output vNMSE, and encode / decode throughput.
// Single-threaded (the machines are small and shared); the caller may run several evaluations in parallel.
//
//   EvalOptions o;  o.schemes = {*ParseScheme("lynx"), *ParseScheme("int8")};
//   KVT_ASSIGN_OR_RETURN(EvalReport r, Evaluate(*source, o, [](absl::string_view s) { std::cerr << s; }));
#ifndef KVT_CODEC_EVAL_EVALUATION_H_
#define KVT_CODEC_EVAL_EVALUATION_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codec/codec.h"
#include "codec/eval/kv_source.h"
#include "codec/eval/metrics.h"

namespace kvt::codec::eval {

struct EvalOptions {
  std::vector<Scheme> schemes;  // at least one
  CodecOptions codec;           // used for every scheme (alpha, centering, anchor rule: the lynx family)
  // A multiple of every scheme's chunk (ResolveChunkTokens of codec.chunk_tokens); 0 = kvtd's own choice
  // (codec::AutoPageTokens).
  int page_tokens = 0;
  // Evaluate at most this many layers, spread evenly over the depth (first and last included); 0 = all.
  int max_layers = 4;
  QueryOptions queries;  // the attention probe's queries (per query head)
  // Also score attention with only K decoded (V exact) and with only V decoded (K exact), so a report shows
  // which tensor's error the vNMSE comes from. Triples the attention work.
  bool attribute_vnmse = false;

  // OK, or INVALID_ARGUMENT naming the bad field.
  absl::Status Validate() const;
};

struct StageResult {
  int stage = 0;  // 0 = anchor only; decodes with streams [0, stage]
  bool full = false;
  double stream_bits_per_value = 0;  // this stage's stream alone
  double bits_per_value = 0;         // streams [0, stage], i.e. what a receiver holds at this stage
  double kv_nmse = 0;                // K and V pooled
  double k_nmse = 0;
  double v_nmse = 0;
  std::optional<double> vnmse;  // absent when the source has no attention structure
  // With EvalOptions::attribute_vnmse: vNMSE with this stage's K and the exact V, and with the exact K and
  // this stage's V.
  std::optional<double> vnmse_k_only, vnmse_v_only;
  // The same per evaluated layer (EvalReport::layers order), so a layer that is worse than the mean shows;
  // empty where the means above are absent.
  std::vector<double> vnmse_per_layer, vnmse_k_only_per_layer, vnmse_v_only_per_layer;
  double decode_values_per_s = 0;
};

struct SchemeResult {
  std::string scheme;
  double encode_values_per_s = 0;
  std::vector<StageResult> stages;  // one per stream
};

struct EvalReport {
  std::string source;            // KvSource::Describe()
  std::vector<int> layers;       // the layers evaluated
  int total_layers = 0;
  HeadLayout layout;
  bool has_attention = false;
  int queries_per_head = 0;
  int page_tokens = 0;
  CodecOptions codec;
  size_t values_per_scheme = 0;  // values encoded per scheme (K and V of every evaluated layer)
  std::vector<SchemeResult> schemes;
  double seconds = 0;  // wall time of the whole evaluation
};

// Called with one line (no newline) at each step; may be empty.
using ProgressFn = std::function<void(absl::string_view)>;

// The `max_layers` layers of `total` spread evenly (0 or >= total: all), ascending.
std::vector<int> SampleLayers(int total, int max_layers);

// Runs the evaluation. Codec errors are returned with the scheme and layer in the message.
absl::StatusOr<EvalReport> Evaluate(const KvSource& source, const EvalOptions& options,
                                    const ProgressFn& progress = nullptr);

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_EVALUATION_H_
