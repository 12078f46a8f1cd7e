// The roundtrip contract; see roundtrip.h.
#include "codec/eval/roundtrip.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvt::codec::eval {

absl::StatusOr<RoundTripResult> RoundTrip(const NpyArray& x, const Scheme& scheme, const CodecOptions& options,
                                          int page_tokens) {
  const auto& s = x.shape;
  const bool kv5 = s.size() == 5 && s[1] == 2;
  if (!kv5 && s.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape [", absl::StrJoin(s, ", "),
        "] is not a KV tensor; expected [T, C] (one layer's K or V) or [L, 2, T, H, D] (every layer's K and V)"));
  }
  for (int64_t d : s) {
    if (d < 1) return absl::InvalidArgumentError(absl::StrCat("empty dimension in shape [", absl::StrJoin(s, ", "), "]"));
  }
  const int64_t tokens = kv5 ? s[2] : s[0];
  const int64_t channels = kv5 ? s[3] * s[4] : s[1];
  if (tokens > std::numeric_limits<int>::max() || channels > kMaxPageChannels) {
    return absl::InvalidArgumentError(absl::StrCat("too many tokens or channels (", tokens, " x ", channels,
                                                   "; at most ", kMaxPageChannels, " channels)"));
  }
  const int64_t tensors = kv5 ? s[0] * 2 : 1;
  const size_t per_tensor = static_cast<size_t>(tokens * channels);
  if (x.data.size() != per_tensor * tensors) return absl::InvalidArgumentError("data size disagrees with shape");

  RoundTripResult result;
  result.stages.resize(scheme.num_streams());
  for (NpyArray& a : result.stages) {
    a.shape = s;
    a.data.resize(x.data.size());
  }
  result.stream_bytes.assign(scheme.num_streams(), 0);
  for (int64_t i = 0; i < tensors; ++i) {
    const std::string what = kv5 ? absl::StrCat("layer ", i / 2, " ", i % 2 == 0 ? "K" : "V") : "tensor";
    const size_t offset = static_cast<size_t>(i) * per_tensor;
    auto enc = EncodeTensor(scheme, options,
                            TensorView{x.data.data() + offset, static_cast<int>(tokens), static_cast<int>(channels)},
                            page_tokens);
    if (!enc.ok()) return absl::Status(enc.status().code(), absl::StrCat(what, ": ", enc.status().message()));
    for (int stage = 0; stage < scheme.num_streams(); ++stage) {
      result.stream_bytes[stage] += enc->StreamBytes(stage);
      absl::Status st = DecodeTensor(*enc, stage + 1, options, result.stages[stage].data.data() + offset);
      if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ", stage ", stage, ": ", st.message()));
    }
  }
  return result;
}

std::vector<std::string> RoundTripFileNames(const std::string& prefix, int num_streams) {
  std::vector<std::string> names;
  for (int i = 0; i + 1 < num_streams; ++i) names.push_back(absl::StrCat(prefix, ".stage", i, ".npy"));
  names.push_back(absl::StrCat(prefix, ".full.npy"));
  return names;
}

}  // namespace kvt::codec::eval
