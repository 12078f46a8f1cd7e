// KV sources for the evaluation; see kv_source.h.
#include "codec/eval/kv_source.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvt::codec::eval {
namespace {

class SyntheticSource : public KvSource {
 public:
  explicit SyntheticSource(SyntheticKvOptions o) : o_(std::move(o)) {}
  int num_layers() const override { return o_.model.layers; }
  HeadLayout layout() const override {
    return HeadLayout{o_.tokens, o_.model.kv_heads, o_.model.head_dim, o_.model.query_heads};
  }
  bool has_attention() const override { return true; }
  LayerKv Layer(int l) const override { return GenerateLayer(o_, l); }
  std::string Describe() const override {
    return absl::StrCat("synthetic ", o_.model.name, " (", o_.model.layers, " layers, ", o_.model.kv_heads,
                        " kv heads x ", o_.model.head_dim, ", ", BulkDistributionName(o_.bulk),
                        " bulk, seed ", o_.seed, "), ", o_.tokens, " tokens");
  }

 private:
  SyntheticKvOptions o_;
};

class NpySource : public KvSource {
 public:
  NpySource(NpyArray a, std::string name, int gqa_group)
      : a_(std::move(a)), name_(std::move(name)), group_(gqa_group) {}
  int num_layers() const override { return a_.shape.size() == 5 ? static_cast<int>(a_.shape[0]) : 1; }
  HeadLayout layout() const override {
    if (a_.shape.size() == 5) {
      const int h = static_cast<int>(a_.shape[3]);
      return HeadLayout{static_cast<int>(a_.shape[2]), h, static_cast<int>(a_.shape[4]), h * group_};
    }
    return HeadLayout{static_cast<int>(a_.shape[0]), 1, static_cast<int>(a_.shape[1]), group_};
  }
  bool has_attention() const override { return a_.shape.size() == 5; }
  LayerKv Layer(int l) const override {
    const HeadLayout lay = layout();
    LayerKv kv;
    kv.tokens = lay.tokens;
    kv.channels = lay.channels();
    const size_t n = static_cast<size_t>(kv.tokens) * kv.channels;
    if (a_.shape.size() == 5) {
      const float* base = a_.data.data() + static_cast<size_t>(l) * 2 * n;
      kv.k.assign(base, base + n);
      kv.v.assign(base + n, base + 2 * n);
    } else {
      kv.k = a_.data;
    }
    return kv;
  }
  std::string Describe() const override {
    return absl::StrCat(name_, " [", absl::StrJoin(a_.shape, ", "), "] ",
                        numerics::DTypeName(a_.source_dtype));
  }

 private:
  NpyArray a_;
  std::string name_;
  int group_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvSource>> MakeSyntheticSource(const SyntheticKvOptions& options) {
  if (auto st = options.Validate(); !st.ok()) return st;
  return std::unique_ptr<KvSource>(new SyntheticSource(options));
}

absl::StatusOr<std::unique_ptr<KvSource>> MakeNpySource(NpyArray array, std::string name, int gqa_group) {
  if (gqa_group < 1) return absl::InvalidArgumentError("gqa_group must be >= 1");
  const auto& s = array.shape;
  const bool kv5 = s.size() == 5 && s[1] == 2;
  if (!kv5 && s.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": shape [", absl::StrJoin(s, ", "),
        "] is not a KV tensor; expected [T, C] (one layer's K or V) or [L, 2, T, H, D] (every layer's K and V)"));
  }
  for (int64_t d : s) {
    if (d < 1 || d > std::numeric_limits<int>::max() / 4) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": every dimension must be >= 1"));
    }
  }
  const int64_t channels = kv5 ? s[3] * s[4] : s[1];
  if (channels > std::numeric_limits<int>::max()) return absl::InvalidArgumentError("too many channels");
  return std::unique_ptr<KvSource>(new NpySource(std::move(array), std::move(name), gqa_group));
}

}  // namespace kvt::codec::eval
