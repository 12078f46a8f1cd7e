// Fidelity metrics of docs/CODEC.md, in double precision: KV NMSE and the attention-output vNMSE of the Lynx
// paper's Table 3, with queries drawn so that attention is peaked as in real models, and grouped-query heads.
// Thread-compatible: an AttentionProbe is immutable after Create, so Evaluate may run from several threads.
//
//   KVT_ASSIGN_OR_RETURN(AttentionProbe probe, AttentionProbe::Create(k, v, layout, {.queries_per_head = 8}));
//   KVT_ASSIGN_OR_RETURN(MeanAccumulator vnmse, probe.Evaluate(k_hat, v_hat));   // vnmse.mean()
#ifndef KVT_CODEC_EVAL_METRICS_H_
#define KVT_CODEC_EVAL_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvt::codec::eval {

// Sums for NMSE = sum ||x - x_hat||^2 / sum ||x||^2, accumulated over any number of tensors.
struct NmseAccumulator {
  double err = 0;  // sum of squared errors
  double ref = 0;  // sum of squared reference values

  void Add(absl::Span<const float> x, absl::Span<const float> x_hat);
  // err / ref; 0 when both are 0; +inf when only ref is 0.
  double value() const;
};

// KV NMSE of one tensor pair (same length required).
double Nmse(absl::Span<const float> x, absl::Span<const float> x_hat);

// A mean of per-sample ratios, accumulated.
struct MeanAccumulator {
  double sum = 0;
  int64_t count = 0;

  void Add(double x) {
    sum += x;
    ++count;
  }
  void Merge(const MeanAccumulator& o) {
    sum += o.sum;
    count += o.count;
  }
  double mean() const { return count == 0 ? 0.0 : sum / count; }
};

// One layer's K or V as the attention sees it: [tokens, kv_heads * head_dim] token-major.
struct HeadLayout {
  int tokens = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int query_heads = 0;  // a positive multiple of kv_heads; query head q reads kv head q / (query_heads/kv_heads)

  int channels() const { return kv_heads * head_dim; }
};

// Queries, [query_heads][queries_per_head][head_dim] flattened.
struct QuerySet {
  int query_heads = 0;
  int queries_per_head = 0;
  int head_dim = 0;
  std::vector<double> q;

  const double* query(int head, int i) const {
    return &q[(static_cast<size_t>(head) * queries_per_head + i) * head_dim];
  }
};

struct QueryOptions {
  int queries_per_head = 8;  // >= 1
  uint64_t seed = 1;
  // Each query aims at 1..max_targets key rows (and often at token 0, the usual sink).
  int max_targets = 3;
  // The logit margin of the aimed-at keys over the average key, drawn uniformly from this range: 5..12 gives
  // attention from sharply peaked to fairly spread, as seen in real heads.
  double min_margin = 5.0;
  double max_margin = 12.0;
  // Weight of the mean-key direction in each query (real queries align with the keys' outlier channels).
  double mean_key_weight = 0.5;
  // Norm of the isotropic Gaussian noise, relative to the aimed direction's unit norm.
  double noise = 0.5;
};

// Draws peaked queries from K: each is a mixture of a few (centred) key rows of its kv head, plus the mean-key
// direction and noise, scaled so that the aimed-at keys get the drawn logit margin. INVALID_ARGUMENT for a bad
// layout or options, or k of the wrong size.
absl::StatusOr<QuerySet> SampleQueries(absl::Span<const float> k, const HeadLayout& layout,
                                       const QueryOptions& options);

// O = softmax(q K^T / sqrt(head_dim)) V for every query, [query_heads][queries_per_head][head_dim] flattened.
// Full (non-causal) attention over all tokens, as a decode step sees its context. Numerically stable for any
// finite logits (the maximum is subtracted). `k` and `v` must have layout.tokens * layout.channels() values.
std::vector<double> AttentionOutputs(absl::Span<const float> k, absl::Span<const float> v,
                                     const HeadLayout& layout, const QuerySet& queries);

// mean over queries of ||o - o_hat||^2 / ||o||^2 (a query whose ||o|| is 0 counts 0 if o_hat is 0 too, else 1).
MeanAccumulator Vnmse(const std::vector<double>& o, const std::vector<double>& o_hat, int head_dim);

// Queries and reference outputs for one layer, fixed at creation; Evaluate scores a decoded K, V against them.
class AttentionProbe {
 public:
  static absl::StatusOr<AttentionProbe> Create(absl::Span<const float> k, absl::Span<const float> v,
                                               const HeadLayout& layout, const QueryOptions& options);

  // vNMSE of attention with the decoded k_hat, v_hat; INVALID_ARGUMENT unless they have the originals' size.
  absl::StatusOr<MeanAccumulator> Evaluate(absl::Span<const float> k_hat, absl::Span<const float> v_hat) const;

  const QuerySet& queries() const { return queries_; }

 private:
  AttentionProbe(HeadLayout layout, QuerySet queries, std::vector<double> reference)
      : layout_(layout), queries_(std::move(queries)), reference_(std::move(reference)) {}

  HeadLayout layout_;
  QuerySet queries_;
  std::vector<double> reference_;
};

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_METRICS_H_
