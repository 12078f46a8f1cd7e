// Fidelity metrics; see metrics.h.
#include "codec/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kvt::codec::eval {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed ^ 0xA0761D6478BD642Full) {}
  double Uniform() { return (static_cast<double>(SplitMix64(state_) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  int Below(int n) { return static_cast<int>(Uniform() * n) % n; }
  double Normal() {
    const double r = std::sqrt(-2.0 * std::log(Uniform()));
    return r * std::cos(6.283185307179586 * Uniform());
  }

 private:
  uint64_t state_;
};

absl::Status CheckLayout(const HeadLayout& l) {
  if (l.tokens < 1 || l.kv_heads < 1 || l.head_dim < 1 || l.query_heads < l.kv_heads ||
      l.query_heads % l.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad attention layout: tokens ", l.tokens, ", kv_heads ",
                                                   l.kv_heads, ", head_dim ", l.head_dim, ", query_heads ",
                                                   l.query_heads));
  }
  return absl::OkStatus();
}

// Copies kv head `h` of a [tokens, channels] tensor into a dense [tokens, head_dim] double array.
void GatherHead(absl::Span<const float> x, const HeadLayout& l, int h, std::vector<double>& out) {
  out.resize(static_cast<size_t>(l.tokens) * l.head_dim);
  for (int t = 0; t < l.tokens; ++t) {
    const float* src = &x[static_cast<size_t>(t) * l.channels() + static_cast<size_t>(h) * l.head_dim];
    double* dst = &out[static_cast<size_t>(t) * l.head_dim];
    for (int d = 0; d < l.head_dim; ++d) dst[d] = src[d];
  }
}

double Dot(const double* a, const double* b, int n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

void NmseAccumulator::Add(absl::Span<const float> x, absl::Span<const float> x_hat) {
  const size_t n = std::min(x.size(), x_hat.size());
  double e = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double{x[i]} - double{x_hat[i]};
    e += d * d;
    r += double{x[i]} * double{x[i]};
  }
  err += e;
  ref += r;
}

double NmseAccumulator::value() const {
  if (ref == 0) return err == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return err / ref;
}

double Nmse(absl::Span<const float> x, absl::Span<const float> x_hat) {
  NmseAccumulator acc;
  acc.Add(x, x_hat);
  return acc.value();
}

absl::StatusOr<QuerySet> SampleQueries(absl::Span<const float> k, const HeadLayout& l, const QueryOptions& o) {
  if (auto st = CheckLayout(l); !st.ok()) return st;
  if (k.size() != static_cast<size_t>(l.tokens) * l.channels()) {
    return absl::InvalidArgumentError(absl::StrCat("K has ", k.size(), " values, the layout needs ",
                                                   static_cast<size_t>(l.tokens) * l.channels()));
  }
  if (o.queries_per_head < 1 || o.max_targets < 1 || !(o.min_margin > 0) || o.max_margin < o.min_margin ||
      o.noise < 0 || o.mean_key_weight < 0) {
    return absl::InvalidArgumentError("bad query options: need queries_per_head >= 1, max_targets >= 1, "
                                      "0 < min_margin <= max_margin, noise >= 0, mean_key_weight >= 0");
  }
  QuerySet qs;
  qs.query_heads = l.query_heads;
  qs.queries_per_head = o.queries_per_head;
  qs.head_dim = l.head_dim;
  qs.q.resize(static_cast<size_t>(l.query_heads) * o.queries_per_head * l.head_dim);
  const int group = l.query_heads / l.kv_heads;
  const int D = l.head_dim;
  const double sqrt_d = std::sqrt(static_cast<double>(D));
  Rng rng(o.seed);
  std::vector<double> kh, mean(D), u(D), mean_dir(D);
  for (int h = 0; h < l.kv_heads; ++h) {
    GatherHead(k, l, h, kh);
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int t = 0; t < l.tokens; ++t) {
      for (int d = 0; d < D; ++d) mean[d] += kh[static_cast<size_t>(t) * D + d];
    }
    double mean_norm = 0;
    for (int d = 0; d < D; ++d) {
      mean[d] /= l.tokens;
      mean_norm += mean[d] * mean[d];
    }
    mean_norm = std::sqrt(mean_norm);
    for (int d = 0; d < D; ++d) mean_dir[d] = mean_norm > 0 ? mean[d] / mean_norm : 0.0;
    for (int g = 0; g < group; ++g) {
      const int qh = h * group + g;
      for (int i = 0; i < o.queries_per_head; ++i) {
        // Aim at a few key rows (centred on the mean key, so the aim is what sets them apart).
        std::vector<int> targets;
        const int n_targets = 1 + rng.Below(o.max_targets);
        for (int j = 0; j < n_targets; ++j) targets.push_back(rng.Below(l.tokens));
        if (rng.Uniform() < 0.3) targets.push_back(0);
        std::fill(u.begin(), u.end(), 0.0);
        for (int t : targets) {
          const double w = 0.5 + rng.Uniform();
          for (int d = 0; d < D; ++d) u[d] += w * (kh[static_cast<size_t>(t) * D + d] - mean[d]);
        }
        double un = std::sqrt(Dot(u.data(), u.data(), D));
        if (un == 0) {  // every key is the same: aim anywhere
          u[0] = 1;
          un = 1;
        }
        double* q = &qs.q[(static_cast<size_t>(qh) * o.queries_per_head + i) * D];
        for (int d = 0; d < D; ++d) {
          q[d] = u[d] / un + o.mean_key_weight * mean_dir[d] + o.noise * rng.Normal() / sqrt_d;
        }
        // Scale so that the aimed-at keys' average logit exceeds the mean key's by the drawn margin.
        double gap = 0;
        for (int t : targets) {
          for (int d = 0; d < D; ++d) gap += q[d] * (kh[static_cast<size_t>(t) * D + d] - mean[d]);
        }
        gap /= targets.size() * sqrt_d;
        const double margin = o.min_margin + (o.max_margin - o.min_margin) * rng.Uniform();
        const double scale = gap > 1e-12 ? margin / gap : 1.0;
        for (int d = 0; d < D; ++d) q[d] *= scale;
      }
    }
  }
  return qs;
}

std::vector<double> AttentionOutputs(absl::Span<const float> k, absl::Span<const float> v, const HeadLayout& l,
                                     const QuerySet& qs) {
  const int D = l.head_dim;
  const int group = l.query_heads / l.kv_heads;
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(static_cast<size_t>(l.query_heads) * qs.queries_per_head * D, 0.0);
  std::vector<double> kh, vh, logits(l.tokens);
  for (int h = 0; h < l.kv_heads; ++h) {
    GatherHead(k, l, h, kh);
    GatherHead(v, l, h, vh);
    for (int g = 0; g < group; ++g) {
      const int qh = h * group + g;
      for (int i = 0; i < qs.queries_per_head; ++i) {
        const double* q = qs.query(qh, i);
        double max_logit = -std::numeric_limits<double>::infinity();
        for (int t = 0; t < l.tokens; ++t) {
          logits[t] = Dot(q, &kh[static_cast<size_t>(t) * D], D) * inv_sqrt_d;
          max_logit = std::max(max_logit, logits[t]);
        }
        double* o = &out[(static_cast<size_t>(qh) * qs.queries_per_head + i) * D];
        double denom = 0;
        for (int t = 0; t < l.tokens; ++t) {
          const double w = std::exp(logits[t] - max_logit);
          denom += w;
          const double* vr = &vh[static_cast<size_t>(t) * D];
          for (int d = 0; d < D; ++d) o[d] += w * vr[d];
        }
        for (int d = 0; d < D; ++d) o[d] /= denom;
      }
    }
  }
  return out;
}

MeanAccumulator Vnmse(const std::vector<double>& o, const std::vector<double>& o_hat, int head_dim) {
  MeanAccumulator acc;
  const size_t n = std::min(o.size(), o_hat.size()) / head_dim;
  for (size_t i = 0; i < n; ++i) {
    double err = 0, ref = 0;
    for (int d = 0; d < head_dim; ++d) {
      const double a = o[i * head_dim + d], b = o_hat[i * head_dim + d];
      err += (a - b) * (a - b);
      ref += a * a;
    }
    acc.Add(ref > 0 ? err / ref : (err > 0 ? 1.0 : 0.0));
  }
  return acc;
}

absl::StatusOr<AttentionProbe> AttentionProbe::Create(absl::Span<const float> k, absl::Span<const float> v,
                                                      const HeadLayout& layout, const QueryOptions& options) {
  auto qs = SampleQueries(k, layout, options);
  if (!qs.ok()) return qs.status();
  if (v.size() != k.size()) return absl::InvalidArgumentError("K and V differ in size");
  std::vector<double> ref = AttentionOutputs(k, v, layout, *qs);
  return AttentionProbe(layout, *std::move(qs), std::move(ref));
}

absl::StatusOr<MeanAccumulator> AttentionProbe::Evaluate(absl::Span<const float> k_hat,
                                                         absl::Span<const float> v_hat) const {
  const size_t n = static_cast<size_t>(layout_.tokens) * layout_.channels();
  if (k_hat.size() != n || v_hat.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("decoded K/V have ", k_hat.size(), "/", v_hat.size(),
                                                   " values, the probe's layout needs ", n));
  }
  return Vnmse(reference_, AttentionOutputs(k_hat, v_hat, layout_, queries_), layout_.head_dim);
}

}  // namespace kvt::codec::eval
