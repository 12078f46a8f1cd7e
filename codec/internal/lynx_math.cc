#include "codec/internal/lynx_math.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace kvt::codec::internal {
namespace {

// 2^(-j/16) for j = 0..15, rounded to float: the constants of docs/FORMAT.md (sigma scale).
std::array<float, 16> SigmaFractions() {
  std::array<float, 16> f{};
  for (int j = 0; j < 16; ++j) f[j] = static_cast<float>(std::exp2(-j / 16.0));
  return f;
}

// expm1(c / M * log1p(alpha)) / alpha: the inverse of the log curve at (fractional) code c, in double.
double CurveValue(double alpha, int max_code, double c) {
  return std::expm1(c / max_code * std::log1p(alpha)) / alpha;
}

std::unique_ptr<LynxTables> BuildTables(float alpha, int bits) {
  auto t = std::make_unique<LynxTables>();
  t->alpha = alpha;
  t->bits = bits;
  const int m = (1 << (bits - 1)) - 1;
  t->max_code = m;
  const double a = alpha;
  t->thresholds.assign(m + 1, 0.0f);
  std::vector<double> exact_thresholds(m + 2, 0.0);  // [0] = 0, [M + 1] = 1: edges of the code intervals
  for (int k = 1; k <= m; ++k) {
    exact_thresholds[k] = CurveValue(a, m, k - 0.5);
    t->thresholds[k] = static_cast<float>(exact_thresholds[k]);
  }
  exact_thresholds[m + 1] = 1.0;
  t->full_values.resize(m + 1);
  for (int i = 0; i <= m; ++i) t->full_values[i] = static_cast<float>(CurveValue(a, m, i));
  t->full_values[0] = 0.0f;

  // Buckets: the smallest power of two with at most one threshold per bucket, capped at 2^13 (then several
  // corrections). The gap between consecutive float thresholds bounds how many fall in a bucket.
  double min_gap = 1.0;
  for (int k = 1; k <= m; ++k) min_gap = std::min(min_gap, double{t->thresholds[k]} - (k == 1 ? 0.0 : t->thresholds[k - 1]));
  int count = 16;
  while (count < (1 << 13) && 1.0 / count > min_gap) count <<= 1;
  t->bucket_count = count;
  t->bucket_base.assign(count + 1, 0);
  for (int j = 0; j <= count; ++j) {
    float edge = static_cast<float>(j) / static_cast<float>(count);  // exact
    int n = 0;
    for (int k = 1; k <= m; ++k) n += t->thresholds[k] <= edge ? 1 : 0;
    t->bucket_base[j] = n;
  }
  int corrections = 0;
  for (int j = 0; j < count; ++j) corrections = std::max(corrections, t->bucket_base[j + 1] - t->bucket_base[j]);
  // A value a in bucket j has j / count <= a < (j + 1) / count: thresholds <= j / count are counted in
  // bucket_base[j], and only those in (j / count, (j + 1) / count), bucket_base[j] + 1 .. bucket_base[j + 1],
  // remain to compare. a == 1 lands in j = count, whose base is already M.
  t->corrections = std::max(corrections, 1);
  t->padded_thresholds.assign(m + t->corrections + 1, std::numeric_limits<float>::infinity());
  for (int k = 1; k <= m; ++k) t->padded_thresholds[k] = t->thresholds[k];

  for (int known = 1; known <= bits; ++known) {
    const int unknown = bits - known;
    for (int rule = 0; rule < 2; ++rule) {
      std::vector<float>& table = t->decode_tables[known][rule];
      table.resize(size_t{1} << known);
      for (int p = 0; p < (1 << known); ++p) {
        const bool neg = (p >> (known - 1)) & 1;
        const int h = p & ((1 << (known - 1)) - 1);
        const int low = h << unknown;
        const int high = ((h + 1) << unknown) - 1;
        double v;
        if (unknown == 0) {
          v = t->full_values[h];
        } else if (rule == 0) {  // kCodeCentre
          v = CurveValue(a, m, (low + high) / 2.0);
        } else {  // kValueCentre: midpoint of [t_low, t_{high+1}) in x_final, with t_0 = 0 and t_{M+1} = 1
          v = (exact_thresholds[low] + exact_thresholds[high + 1]) / 2.0;
        }
        float fv = static_cast<float>(v);
        table[p] = neg ? -fv : fv;
      }
    }
  }
  return t;
}

}  // namespace

const std::array<float, 256>& SigmaScaleTable() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> s{};
    const std::array<float, 16> frac = SigmaFractions();
    s[0] = 0.0f;
    for (int q = 1; q < 256; ++q) s[q] = std::ldexp(frac[(255 - q) % 16], -((255 - q) / 16));
    return s;
  }();
  return table;
}

std::shared_ptr<const LynxTables> GetLynxTables(float alpha, int bits) {
  static absl::Mutex mu;
  static auto* cache = new std::map<std::pair<uint32_t, int>, std::shared_ptr<const LynxTables>>();
  constexpr size_t kMaxCached = 256;
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &alpha, 4);
  const auto key = std::make_pair(alpha_bits, bits);
  {
    absl::MutexLock lock(&mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  std::shared_ptr<const LynxTables> built = BuildTables(alpha, bits);
  absl::MutexLock lock(&mu);
  if (cache->size() < kMaxCached) cache->emplace(key, built);
  return built;
}

}  // namespace kvt::codec::internal
