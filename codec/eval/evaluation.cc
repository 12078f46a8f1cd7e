// The evaluation driver; see evaluation.h.
#include "codec/eval/evaluation.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/eval/tensor_codec.h"
#include "codec/page.h"

namespace kvt::codec::eval {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct StageSums {
  NmseAccumulator k, v;
  MeanAccumulator vnmse, vnmse_k_only, vnmse_v_only;
  std::vector<double> vnmse_layers, vnmse_k_only_layers, vnmse_v_only_layers;  // one per evaluated layer
  size_t stream_bytes = 0;
  double decode_seconds = 0;
};

struct SchemeSums {
  double encode_seconds = 0;
  std::vector<StageSums> stages;
};

}  // namespace

absl::Status EvalOptions::Validate() const {
  if (schemes.empty()) return absl::InvalidArgumentError("no schemes to evaluate");
  if (auto st = codec.Validate(); !st.ok()) return st;
  for (const Scheme& scheme : schemes) {
    const int chunk = ResolveChunkTokens(scheme, codec.chunk_tokens);
    if (page_tokens != 0 && (page_tokens < chunk || page_tokens % chunk != 0 || page_tokens > kMaxPageTokens)) {
      return absl::InvalidArgumentError(absl::StrCat("page_tokens (", page_tokens,
                                                     ") must be 0 (kvtd's choice) or a multiple of ", scheme.Name(),
                                                     "'s chunk_tokens (", chunk, ") and at most ", kMaxPageTokens));
    }
  }
  if (max_layers < 0) return absl::InvalidArgumentError("max_layers must be >= 0 (0 = all)");
  if (queries.queries_per_head < 1) return absl::InvalidArgumentError("queries_per_head must be >= 1");
  return absl::OkStatus();
}

std::vector<int> SampleLayers(int total, int max_layers) {
  std::vector<int> layers;
  if (max_layers <= 0 || max_layers >= total) {
    for (int l = 0; l < total; ++l) layers.push_back(l);
    return layers;
  }
  if (max_layers == 1) return {0};
  for (int i = 0; i < max_layers; ++i) {
    const int l = static_cast<int>((static_cast<int64_t>(i) * (total - 1) + (max_layers - 1) / 2) / (max_layers - 1));
    if (layers.empty() || layers.back() != l) layers.push_back(l);
  }
  return layers;
}

absl::StatusOr<EvalReport> Evaluate(const KvSource& source, const EvalOptions& options,
                                    const ProgressFn& progress) {
  if (auto st = options.Validate(); !st.ok()) return st;
  const auto start = Clock::now();
  EvalReport report;
  report.source = source.Describe();
  report.total_layers = source.num_layers();
  report.layers = SampleLayers(source.num_layers(), options.max_layers);
  report.layout = source.layout();
  report.has_attention = source.has_attention();
  report.queries_per_head = options.queries.queries_per_head;
  report.page_tokens = options.page_tokens != 0 ? options.page_tokens : AutoPageTokens(report.layout.channels());
  report.codec = options.codec;

  std::vector<SchemeSums> sums(options.schemes.size());
  for (size_t s = 0; s < options.schemes.size(); ++s) sums[s].stages.resize(options.schemes[s].num_streams());

  for (size_t li = 0; li < report.layers.size(); ++li) {
    const int layer = report.layers[li];
    const std::string where = absl::StrCat("layer ", layer, " (", li + 1, "/", report.layers.size(), ")");
    if (progress) progress(absl::StrCat(where, ": preparing KV and reference attention"));
    const LayerKv kv = source.Layer(layer);
    std::vector<const std::vector<float>*> tensors = {&kv.k};
    if (!kv.v.empty()) tensors.push_back(&kv.v);
    std::optional<AttentionProbe> probe;
    if (source.has_attention()) {
      QueryOptions q = options.queries;
      q.seed = options.queries.seed * 1000003 + layer;
      auto p = AttentionProbe::Create(kv.k, kv.v, report.layout, q);
      if (!p.ok()) return p.status();
      probe.emplace(*std::move(p));
    }
    std::vector<std::vector<float>> decoded(tensors.size(), std::vector<float>(kv.k.size()));
    for (size_t s = 0; s < options.schemes.size(); ++s) {
      const Scheme& scheme = options.schemes[s];
      const std::string name = scheme.Name();
      if (progress) progress(absl::StrCat(where, ": ", name));
      std::vector<EncodedTensor> encoded;
      auto t0 = Clock::now();
      for (const std::vector<float>* x : tensors) {
        auto enc = EncodeTensor(scheme, options.codec, TensorView{x->data(), kv.tokens, kv.channels},
                                options.page_tokens);
        if (!enc.ok()) {
          return absl::Status(enc.status().code(),
                              absl::StrCat(name, ", layer ", layer, ": encode: ", enc.status().message()));
        }
        encoded.push_back(*std::move(enc));
      }
      sums[s].encode_seconds += Seconds(t0);
      for (int stage = 0; stage < scheme.num_streams(); ++stage) {
        StageSums& st = sums[s].stages[stage];
        t0 = Clock::now();
        for (size_t i = 0; i < tensors.size(); ++i) {
          absl::Status d = DecodeTensor(encoded[i], stage + 1, options.codec, decoded[i].data());
          if (!d.ok()) {
            return absl::Status(d.code(), absl::StrCat(name, ", layer ", layer, ": decode stage ", stage, ": ",
                                                       d.message()));
          }
        }
        st.decode_seconds += Seconds(t0);
        for (size_t i = 0; i < tensors.size(); ++i) st.stream_bytes += encoded[i].StreamBytes(stage);
        st.k.Add(kv.k, decoded[0]);
        if (tensors.size() > 1) st.v.Add(kv.v, decoded[1]);
        if (probe) {
          auto v = probe->Evaluate(decoded[0], decoded[1]);
          if (!v.ok()) return v.status();
          st.vnmse.Merge(*v);
          st.vnmse_layers.push_back(v->mean());
          if (options.attribute_vnmse) {
            auto k_only = probe->Evaluate(decoded[0], kv.v);
            if (!k_only.ok()) return k_only.status();
            st.vnmse_k_only.Merge(*k_only);
            st.vnmse_k_only_layers.push_back(k_only->mean());
            auto v_only = probe->Evaluate(kv.k, decoded[1]);
            if (!v_only.ok()) return v_only.status();
            st.vnmse_v_only.Merge(*v_only);
            st.vnmse_v_only_layers.push_back(v_only->mean());
          }
        }
      }
    }
  }

  const size_t values_per_tensor = static_cast<size_t>(report.layout.tokens) * report.layout.channels();
  report.values_per_scheme =
      values_per_tensor * report.layers.size() * (source.has_attention() ? 2 : 1);
  const double values = static_cast<double>(report.values_per_scheme);
  for (size_t s = 0; s < options.schemes.size(); ++s) {
    SchemeResult r;
    r.scheme = options.schemes[s].Name();
    r.encode_values_per_s = sums[s].encode_seconds > 0 ? values / sums[s].encode_seconds : 0;
    double cumulative = 0;
    for (size_t stage = 0; stage < sums[s].stages.size(); ++stage) {
      const StageSums& st = sums[s].stages[stage];
      StageResult out;
      out.stage = static_cast<int>(stage);
      out.full = stage + 1 == sums[s].stages.size();
      out.stream_bits_per_value = 8.0 * st.stream_bytes / values;
      cumulative += out.stream_bits_per_value;
      out.bits_per_value = cumulative;
      out.k_nmse = st.k.value();
      out.v_nmse = source.has_attention() ? st.v.value() : 0.0;
      NmseAccumulator pooled;
      pooled.err = st.k.err + st.v.err;
      pooled.ref = st.k.ref + st.v.ref;
      out.kv_nmse = pooled.value();
      if (source.has_attention()) {
        out.vnmse = st.vnmse.mean();
        out.vnmse_per_layer = st.vnmse_layers;
      }
      if (source.has_attention() && options.attribute_vnmse) {
        out.vnmse_k_only = st.vnmse_k_only.mean();
        out.vnmse_v_only = st.vnmse_v_only.mean();
        out.vnmse_k_only_per_layer = st.vnmse_k_only_layers;
        out.vnmse_v_only_per_layer = st.vnmse_v_only_layers;
      }
      out.decode_values_per_s = st.decode_seconds > 0 ? values / st.decode_seconds : 0;
      r.stages.push_back(out);
    }
    report.schemes.push_back(std::move(r));
  }
  report.seconds = Seconds(start);
  return report;
}

}  // namespace kvt::codec::eval
