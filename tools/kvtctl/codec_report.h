// How `kvtctl codec eval` (and `kvtctl demo`) present an EvalReport: a readable table, or one JSON document
// whose field names docs/BENCHMARKS.md documents. Thread-compatible plain functions.
#ifndef KVT_TOOLS_KVTCTL_CODEC_REPORT_H_
#define KVT_TOOLS_KVTCTL_CODEC_REPORT_H_

#include <string>

#include "codec/eval/evaluation.h"
#include "nlohmann/json.hpp"

namespace kvt::kvtctl {

// "0", "1", ... for partial decodes, "full" for the last stage.
std::string StageLabel(const codec::eval::StageResult& stage);

// A header saying what was measured (data, layers sampled, queries, codec options) and one row per scheme and
// stage: scheme, stage, bits/value (cumulative and this stream's), KV NMSE, attention vNMSE, encode and decode
// throughput.
std::string FormatEvalTable(const codec::eval::EvalReport& report);

nlohmann::json EvalReportJson(const codec::eval::EvalReport& report);

const char* CenteringName(codec::Centering c);
const char* AnchorRuleName(codec::AnchorRule r);
// "exact-extremes" or "table-extremes" (CodecOptions::exact_extremes).
const char* ExtremesName(bool exact_extremes);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_CODEC_REPORT_H_
