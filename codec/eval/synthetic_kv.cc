// The synthetic KV generator; see synthetic_kv.h. Random numbers come from splitmix64 and hand-written
// transforms (not <random>'s distributions, whose output differs between standard libraries), so the data
// is the same on every platform.
#include "codec/eval/synthetic_kv.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvt::codec::eval {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Scale of the slowly varying (AR(1), rho = 0.95) component relative to the bulk: neighbouring tokens of a
// real context are correlated, which is what per-chunk metadata exploits.
constexpr double kDriftScale = 0.4;
constexpr double kDriftRho = 0.95;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) { SplitMix64(state_); }
  Rng(uint64_t seed, uint64_t a, uint64_t b) : state_(seed) {
    state_ ^= SplitMix64(a) + 0x632BE59BD9B4E019ull * (b + 1);
    SplitMix64(state_);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(SplitMix64(state_) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double Normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(Uniform()));
    const double phi = 2.0 * kPi * Uniform();
    spare_ = r * std::sin(phi);
    have_spare_ = true;
    return r * std::cos(phi);
  }
  // Unit-variance Laplace.
  double Laplace() {
    const double u = Uniform() - 0.5;
    const double b = 1.0 / std::sqrt(2.0);
    return u < 0 ? b * std::log(1.0 + 2.0 * u) : -b * std::log(1.0 - 2.0 * u);
  }
  // Unit-variance Student-t with 3 degrees of freedom (variance 3 before scaling).
  double StudentT3() {
    const double z = Normal();
    const double a = Normal(), b = Normal(), c = Normal();
    const double chi2 = a * a + b * b + c * c;
    return z / std::sqrt(chi2 / 3.0) / std::sqrt(3.0);
  }
  double Bulk(BulkDistribution d) { return d == BulkDistribution::kLaplace ? Laplace() : StudentT3(); }
  int Below(int n) { return static_cast<int>(Uniform() * n) % n; }

 private:
  uint64_t state_;
  bool have_spare_ = false;
  double spare_ = 0;
};

// Per-channel parameters of one layer's K or V before rotation.
struct ChannelParams {
  std::vector<double> mean;
  std::vector<double> scale;
  std::vector<double> sink_offset;  // added to sink tokens (a fixed direction per layer)
};

ChannelParams KeyParams(const SyntheticKvOptions& o, int layer) {
  const ModelShape& m = o.model;
  const int d2 = m.head_dim / 2;
  Rng rng(o.seed, 1000 + layer, 1);
  const double layer_scale = std::exp(0.3 * rng.Normal());
  ChannelParams p;
  p.mean.resize(m.channels());
  p.scale.resize(m.channels());
  p.sink_offset.resize(m.channels());
  for (int c = 0; c < m.channels(); ++c) {
    p.scale[c] = layer_scale * std::exp(0.35 * rng.Normal());
    p.mean[c] = 0.8 * layer_scale * rng.Normal();
    p.sink_offset[c] = 10.0 * layer_scale * rng.Normal();
  }
  // Outliers: one or two low-frequency pairs per head (i in the top quarter of [0, d2)), magnitude 10-100x.
  for (int h = 0; h < m.kv_heads; ++h) {
    const int n_out = 1 + rng.Below(2);
    for (int j = 0; j < n_out; ++j) {
      const int lo = d2 - std::max(1, d2 / 4);
      const int i = lo + rng.Below(d2 - lo);
      const double factor = 10.0 * std::pow(10.0, rng.Uniform());
      const int c0 = h * m.head_dim + i, c1 = c0 + d2;
      // Relative to the bulk channels' RMS (about 1.34 * layer_scale: mean 0.8, scale 1, drift 0.4).
      const double magnitude = 1.34 * factor * layer_scale;
      p.mean[c0] = magnitude * (0.85 + 0.15 * rng.Uniform()) * (rng.Uniform() < 0.5 ? -1 : 1);
      p.mean[c1] = magnitude * (0.85 + 0.15 * rng.Uniform()) * (rng.Uniform() < 0.5 ? -1 : 1);
      p.scale[c0] = p.scale[c1] = 0.15 * magnitude;
    }
  }
  return p;
}

ChannelParams ValueParams(const SyntheticKvOptions& o, int layer) {
  const ModelShape& m = o.model;
  Rng rng(o.seed, 2000 + layer, 2);
  const double layer_scale = 0.5 * std::exp(0.3 * rng.Normal());
  ChannelParams p;
  p.mean.resize(m.channels());
  p.scale.resize(m.channels());
  p.sink_offset.resize(m.channels());
  for (int c = 0; c < m.channels(); ++c) {
    p.scale[c] = layer_scale * std::exp(0.3 * rng.Normal());
    p.mean[c] = 0.2 * p.scale[c] * rng.Normal();
    p.sink_offset[c] = 8.0 * layer_scale * rng.Normal();
  }
  // A milder outlier channel in about one head in four.
  for (int h = 0; h < m.kv_heads; ++h) {
    if (rng.Uniform() < 0.25) {
      const int c = h * m.head_dim + rng.Below(m.head_dim);
      p.scale[c] *= 10.0 + 10.0 * rng.Uniform();
    }
  }
  return p;
}

// Fills `out` [tokens, channels] with mean + scale * (bulk + drift), sinks offset.
void FillBase(const SyntheticKvOptions& o, const ChannelParams& p, const std::vector<int>& sinks, Rng& rng,
              std::vector<float>& out) {
  const int channels = o.model.channels();
  std::vector<double> drift(channels);
  for (double& d : drift) d = rng.Normal();
  const double innov = std::sqrt(1.0 - kDriftRho * kDriftRho);
  size_t next_sink = 0;
  for (int t = 0; t < o.tokens; ++t) {
    const bool sink = next_sink < sinks.size() && sinks[next_sink] == t;
    if (sink) ++next_sink;
    float* row = &out[static_cast<size_t>(t) * channels];
    for (int c = 0; c < channels; ++c) {
      drift[c] = kDriftRho * drift[c] + innov * rng.Normal();
      double x = p.mean[c] + p.scale[c] * (rng.Bulk(o.bulk) + kDriftScale * drift[c]);
      if (sink) x += p.sink_offset[c];
      row[c] = static_cast<float>(x);
    }
  }
}

// Rotates each head's pairs (i, i + head_dim/2) by t * base^(-2i/head_dim), as rotate_half RoPE does.
void ApplyRope(const ModelShape& m, int tokens, std::vector<float>& k) {
  const int d2 = m.head_dim / 2;
  std::vector<double> freq(d2);
  for (int i = 0; i < d2; ++i) freq[i] = std::pow(m.rope_base, -2.0 * i / m.head_dim);
  for (int t = 0; t < tokens; ++t) {
    float* row = &k[static_cast<size_t>(t) * m.channels()];
    for (int i = 0; i < d2; ++i) {
      const double a = t * freq[i];
      const double cs = std::cos(a), sn = std::sin(a);
      for (int h = 0; h < m.kv_heads; ++h) {
        float* x = row + h * m.head_dim;
        const double x0 = x[i], x1 = x[i + d2];
        x[i] = static_cast<float>(x0 * cs - x1 * sn);
        x[i + d2] = static_cast<float>(x0 * sn + x1 * cs);
      }
    }
  }
}

float RoundToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even (inputs are finite)
  u &= 0xFFFF0000u;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

std::vector<std::string> ModelPresetNames() { return {"llama-3.1-8b", "qwen3-32b", "smollm2-135m", "tiny"}; }

absl::StatusOr<ModelShape> ModelPreset(absl::string_view name) {
  if (name == "llama-3.1-8b") return ModelShape{"llama-3.1-8b", 32, 8, 32, 128, 500000.0};
  if (name == "qwen3-32b") return ModelShape{"qwen3-32b", 64, 8, 64, 128, 1000000.0};
  if (name == "smollm2-135m") return ModelShape{"smollm2-135m", 30, 3, 9, 64, 100000.0};
  if (name == "tiny") return ModelShape{"tiny", 4, 2, 4, 16, 10000.0};
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", name, "'; presets: ", absl::StrJoin(ModelPresetNames(), ", ")));
}

absl::StatusOr<BulkDistribution> ParseBulkDistribution(absl::string_view name) {
  if (name == "laplace") return BulkDistribution::kLaplace;
  if (name == "student-t") return BulkDistribution::kStudentT;
  return absl::InvalidArgumentError(absl::StrCat("unknown bulk distribution '", name, "'; use laplace or student-t"));
}

const char* BulkDistributionName(BulkDistribution d) {
  return d == BulkDistribution::kLaplace ? "laplace" : "student-t";
}

absl::StatusOr<SyntheticKvOptions> SyntheticKvOptions::ForModel(absl::string_view model_name, int tokens) {
  SyntheticKvOptions o;
  auto model = ModelPreset(model_name);
  if (!model.ok()) return model.status();
  o.model = *model;
  o.tokens = tokens;
  auto st = o.Validate();
  if (!st.ok()) return st;
  return o;
}

absl::Status SyntheticKvOptions::Validate() const {
  if (model.layers < 1 || model.kv_heads < 1 || model.head_dim < 2 || model.head_dim % 2 != 0) {
    return absl::InvalidArgumentError("model shape needs layers >= 1, kv_heads >= 1 and an even head_dim");
  }
  if (model.query_heads < model.kv_heads || model.query_heads % model.kv_heads != 0) {
    return absl::InvalidArgumentError("model query_heads must be a positive multiple of kv_heads");
  }
  if (!(model.rope_base > 1.0)) return absl::InvalidArgumentError("model rope_base must be > 1");
  if (tokens < 1 || tokens > (1 << 20)) return absl::InvalidArgumentError("tokens must be in [1, 1048576]");
  if (sink_every < 0) return absl::InvalidArgumentError("sink_every must be >= 0");
  return absl::OkStatus();
}

std::vector<int> SinkTokens(const SyntheticKvOptions& o) {
  std::vector<int> sinks = {0};
  if (o.sink_every <= 0) return sinks;
  Rng rng(o.seed, 7, 7);
  for (int start = o.sink_every; start < o.tokens; start += o.sink_every) {
    const int span = std::min(o.sink_every, o.tokens - start);
    sinks.push_back(start + rng.Below(span));
  }
  return sinks;
}

LayerKv GenerateLayer(const SyntheticKvOptions& o, int layer) {
  LayerKv kv;
  kv.tokens = o.tokens;
  kv.channels = o.model.channels();
  const size_t n = static_cast<size_t>(o.tokens) * kv.channels;
  kv.k.resize(n);
  kv.v.resize(n);
  const std::vector<int> sinks = SinkTokens(o);
  Rng krng(o.seed, layer, 11), vrng(o.seed, layer, 12);
  FillBase(o, KeyParams(o, layer), sinks, krng, kv.k);
  FillBase(o, ValueParams(o, layer), sinks, vrng, kv.v);
  ApplyRope(o.model, o.tokens, kv.k);
  if (o.bf16_values) {
    for (float& x : kv.k) x = RoundToBf16(x);
    for (float& x : kv.v) x = RoundToBf16(x);
  }
  return kv;
}

}  // namespace kvt::codec::eval
