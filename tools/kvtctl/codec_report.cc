// Table and JSON output of the codec evaluation; see codec_report.h.
#include "tools/kvtctl/codec_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kvt::kvtctl {

using codec::eval::EvalReport;
using codec::eval::SchemeResult;
using codec::eval::StageResult;

const char* CenteringName(codec::Centering c) { return c == codec::Centering::kMidrange ? "midrange" : "mean"; }

const char* AnchorRuleName(codec::AnchorRule r) {
  switch (r) {
    case codec::AnchorRule::kCodeCentre:
      return "code-centre";
    case codec::AnchorRule::kValueCentre:
      return "value-centre";
    case codec::AnchorRule::kConditionalMean:
      return "conditional-mean";
  }
  return "unknown";
}

const char* ExtremesName(bool exact_extremes) { return exact_extremes ? "exact-extremes" : "table-extremes"; }

std::string StageLabel(const StageResult& stage) { return stage.full ? "full" : absl::StrCat(stage.stage); }

std::string FormatEvalTable(const EvalReport& r) {
  std::string s = absl::StrCat("data: ", r.source, "\n");
  absl::StrAppend(&s, "layers evaluated: ", absl::StrJoin(r.layers, " "), " (", r.layers.size(), " of ",
                  r.total_layers, "); K and V in pages of ", r.page_tokens, " tokens, chunks of ",
                  r.codec.chunk_tokens, "\n");
  if (r.has_attention) {
    absl::StrAppend(&s, "attention vNMSE: ", r.layout.query_heads, " query heads on ", r.layout.kv_heads,
                    " kv heads (GQA ", r.layout.query_heads / r.layout.kv_heads, ":1), ", r.queries_per_head,
                    " sampled peaked queries per query head and layer, over all ", r.layout.tokens, " tokens\n");
  } else {
    absl::StrAppend(&s, "attention vNMSE: n/a (a single [T, C] tensor has no K/V pairing)\n");
  }
  absl::StrAppendFormat(&s, "lynx options: alpha %g, top width %g, %s centering, %s anchors, %s\n", r.codec.alpha,
                        r.codec.top_width,
                        CenteringName(r.codec.centering), AnchorRuleName(r.codec.anchor_rule),
                        ExtremesName(r.codec.exact_extremes));
  absl::StrAppend(&s, "bits/value include container headers and metadata; stage 0 = anchor only; ",
                  "throughput in million values per second, one core\n\n");
  bool attributed = false;
  for (const SchemeResult& sr : r.schemes) {
    for (const StageResult& st : sr.stages) attributed = attributed || st.vnmse_k_only.has_value();
  }
  absl::StrAppendFormat(&s, "%-13s %-5s %9s %9s %11s %11s %10s %10s", "scheme", "stage", "bits/val", "stream",
                        "KV NMSE", "attn vNMSE", "enc MV/s", "dec MV/s");
  if (attributed) absl::StrAppendFormat(&s, " %11s %11s %11s %11s", "K NMSE", "V NMSE", "vNMSE K", "vNMSE V");
  absl::StrAppend(&s, "\n");
  for (const SchemeResult& sr : r.schemes) {
    for (const StageResult& st : sr.stages) {
      const std::string vnmse = st.vnmse ? absl::StrFormat("%.3e", *st.vnmse) : "n/a";
      const std::string enc = st.stage == 0 ? absl::StrFormat("%.1f", sr.encode_values_per_s / 1e6) : "";
      absl::StrAppendFormat(&s, "%-13s %-5s %9.3f %9.3f %11.3e %11s %10s %10.1f", sr.scheme, StageLabel(st),
                            st.bits_per_value, st.stream_bits_per_value, st.kv_nmse, vnmse, enc,
                            st.decode_values_per_s / 1e6);
      if (attributed) {
        absl::StrAppendFormat(&s, " %11.3e %11.3e %11.3e %11.3e", st.k_nmse, st.v_nmse, st.vnmse_k_only.value_or(0),
                              st.vnmse_v_only.value_or(0));
      }
      absl::StrAppend(&s, "\n");
    }
  }
  if (attributed) {
    absl::StrAppend(&s, "\nvNMSE K: attention with this stage's K and the exact V; vNMSE V: the exact K and this "
                        "stage's V\n");
  }
  absl::StrAppendFormat(&s, "\n%.1f s\n", r.seconds);
  return s;
}

nlohmann::json EvalReportJson(const EvalReport& r) {
  nlohmann::json j;
  j["source"] = r.source;
  j["layers_evaluated"] = r.layers;
  j["total_layers"] = r.total_layers;
  j["tokens"] = r.layout.tokens;
  j["kv_heads"] = r.layout.kv_heads;
  j["head_dim"] = r.layout.head_dim;
  j["query_heads"] = r.has_attention ? nlohmann::json(r.layout.query_heads) : nlohmann::json(nullptr);
  j["queries_per_head"] = r.has_attention ? nlohmann::json(r.queries_per_head) : nlohmann::json(nullptr);
  j["page_tokens"] = r.page_tokens;
  j["values_per_scheme"] = r.values_per_scheme;
  j["codec_options"] = {{"chunk_tokens", r.codec.chunk_tokens},
                        {"alpha", r.codec.alpha},
                        {"top_width", r.codec.top_width},
                        {"centering", CenteringName(r.codec.centering)},
                        {"anchor_rule", AnchorRuleName(r.codec.anchor_rule)},
                        {"exact_extremes", r.codec.exact_extremes}};
  j["seconds"] = r.seconds;
  nlohmann::json schemes = nlohmann::json::array();
  for (const SchemeResult& sr : r.schemes) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StageResult& st : sr.stages) {
      stages.push_back(
          {{"stage", st.stage},
           {"label", StageLabel(st)},
           {"full", st.full},
           {"bits_per_value", st.bits_per_value},
           {"stream_bits_per_value", st.stream_bits_per_value},
           {"kv_nmse", st.kv_nmse},
           {"k_nmse", st.k_nmse},
           {"v_nmse", r.has_attention ? nlohmann::json(st.v_nmse) : nlohmann::json(nullptr)},
           {"attention_vnmse", st.vnmse ? nlohmann::json(*st.vnmse) : nlohmann::json(nullptr)},
           {"attention_vnmse_k_only", st.vnmse_k_only ? nlohmann::json(*st.vnmse_k_only) : nlohmann::json(nullptr)},
           {"attention_vnmse_v_only", st.vnmse_v_only ? nlohmann::json(*st.vnmse_v_only) : nlohmann::json(nullptr)},
           {"attention_vnmse_per_layer", st.vnmse_per_layer},
           {"attention_vnmse_k_only_per_layer", st.vnmse_k_only_per_layer},
           {"attention_vnmse_v_only_per_layer", st.vnmse_v_only_per_layer},
           {"decode_values_per_s", st.decode_values_per_s}});
    }
    schemes.push_back(
        {{"scheme", sr.scheme}, {"encode_values_per_s", sr.encode_values_per_s}, {"stages", std::move(stages)}});
  }
  j["schemes"] = std::move(schemes);
  return j;
}

}  // namespace kvt::kvtctl
