#include "codec/internal/lynx_math.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace kvt::codec::internal {
namespace {

// expm1(c / M * log1p(alpha)) / alpha: the inverse of the plain log curve at (fractional) code c, in double.
double LogCurveValue(double alpha, int max_code, double c) {
  return std::expm1(c / max_code * std::log1p(alpha)) / alpha;
}

// Whether codes of max_code have a knee at width w: 8-bit codes only (the knee narrows a 4-bit anchor's outermost
// cell; lynx4 and other widths keep the plain curve).
bool HasKnee(double w, int max_code) { return w > 0 && max_code == 127; }

// c0: the fractional code where the knee's linear top begins (threshold t_{(M + 1) 7/8}).
double KneeCode(int max_code) { return (max_code + 1) * 7.0 / 8.0 - 0.5; }

// V(c) of lynx_math.h: the curve's value at (fractional) code c, in double.
double CurveValue(double alpha, double w, int max_code, double c) {
  if (!HasKnee(w, max_code)) return LogCurveValue(alpha, max_code, c);
  const double c0 = KneeCode(max_code);
  if (c <= c0) return (1.0 - w) * LogCurveValue(alpha, max_code, c) / LogCurveValue(alpha, max_code, c0);
  return 1.0 - w + w * (c - c0) / (max_code - c0);
}

// The guesses' target in code units: max(bulk(a), knee line). That is the curve's inverse for any alpha while
// w <= (M - c0) / M (kMaxTopWidth): the line then starts at or below 0 at a = 0, under the concave bulk up to the
// knee and above it after. Were it not, the checks below would fail and the encoders take the bucket path.
double GuessTarget(const LynxTables& t, float a) {
  const double bulk = std::log2(1.0 + double{t.guess_alpha} * a) * t.guess_scale;
  return std::max(bulk, double{t.knee_slope} * a + double{t.knee_offset});
}

// The guess must be within 0.3 of its target (GuessTarget: the curve's inverse), so that I is floor(guess) or one more (I's float
// thresholds sit within rounding of the half-integers, so y in [f - 0.3, f + 1.3) crosses only t_{f+1}), checked on a dense grid and around every threshold. The vector code adds the
// error of its 14-bit reciprocal estimate of 1 / (m + 1): u off by at most 2^-14 relative, so y off by at most
// guess_scale * 2/ln2 * u * 2^-14 <= M * 0.35 * 2.89 * 6.1e-5 < 0.008 (u <= alpha / (2 + alpha) and
// alpha / ((2 + alpha) log2(1 + alpha)) <= ln2 / 2), plus float rounding (~1e-5): inside the 0.1 margin left.
// The probes of both guesses' checks: a dense grid over [0, 1] and each threshold with its float neighbours.
std::vector<float> GuessProbes(const LynxTables& t) {
  std::vector<float> probes;
  for (int i = 0; i <= (1 << 16); ++i) probes.push_back(static_cast<float>(i) / (1 << 16));
  for (int k = 1; k <= t.max_code; ++k) {
    probes.push_back(t.thresholds[k]);
    probes.push_back(std::nextafter(t.thresholds[k], 0.0f));
    probes.push_back(std::nextafter(t.thresholds[k], 2.0f));
  }
  return probes;
}

bool VerifyLogGuess(const LynxTables& t) {
  for (float a : GuessProbes(t)) {
    if (a < 0.0f || a > 1.0f) continue;
    const double exact = GuessTarget(t, a);
    const double guess = LogGuess(t, a);
    if (!(std::fabs(guess - exact) < 0.3)) return false;
    int f = static_cast<int>(std::floor(guess));
    f = std::min(std::max(f, 0), t.max_code);
    const int gap = MagnitudeCode(t, a) - f;
    if (gap < 0 || gap > 1) return false;
  }
  return true;
}

// The polynomial guess is computed exactly as the vector code does (PolyGuess), so the check needs no allowance
// for the vector arithmetic: within 0.25 of the curve on the probes; between grid points (2^-16 apart) the curve
// moves by at most its steepest slope * 2^-16: M * alpha / ln(1 + alpha) * 2^-16 < 0.01 for the alphas that
// pass, and the knee's line (M - c0) / w <= 775 codes per unit gives < 0.012; the cubic is smooth.
// y >= 0 (a >= 0 and a positive polynomial), so the truncation is the floor.
bool VerifyPolyGuess(const LynxTables& t) {
  for (float a : GuessProbes(t)) {
    if (a < 0.0f || a > 1.0f) continue;
    const double exact = GuessTarget(t, a);
    const float guess = PolyGuess(t, a);
    if (!(guess >= 0.0f) || !(std::fabs(guess - exact) < 0.25)) return false;
    if (t.top_width > 0.0f && !(guess < static_cast<float>(t.max_code + 1))) return false;  // no clamp needed
    const int f = std::min(static_cast<int>(guess), t.max_code);
    const int gap = MagnitudeCode(t, a) - f;
    if (gap < 0 || gap > 1) return false;
  }
  return true;
}

// Interpolates p(a) = y(a) / a (y = M log1p(guess_alpha a) / log1p(alpha), the bulk in code units) at the four
// Chebyshev nodes of [0, 1] and returns its monomial coefficients, rounded to float.
std::array<float, 4> FitPolyGuess(double alpha, double guess_alpha, int max_code) {
  constexpr int kN = 4;
  double a[kN][kN + 1];
  for (int i = 0; i < kN; ++i) {
    const double x = 0.5 - 0.5 * std::cos(M_PI * (i + 0.5) / kN);
    const double y = max_code * std::log1p(guess_alpha * x) / std::log1p(alpha);
    for (int j = 0; j < kN; ++j) a[i][j] = std::pow(x, j);
    a[i][kN] = y / x;
  }
  for (int col = 0; col < kN; ++col) {  // Gaussian elimination with partial pivoting
    int pivot = col;
    for (int r = col + 1; r < kN; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    }
    for (int j = 0; j <= kN; ++j) std::swap(a[col][j], a[pivot][j]);
    for (int r = 0; r < kN; ++r) {
      if (r == col) continue;
      const double factor = a[r][col] / a[col][col];
      for (int j = col; j <= kN; ++j) a[r][j] -= factor * a[col][j];
    }
  }
  std::array<float, 4> c{};
  for (int i = 0; i < kN; ++i) c[i] = static_cast<float>(a[i][kN] / a[i][i]);
  return c;
}

std::unique_ptr<LynxTables> BuildTables(float alpha, float top_width, int bits) {
  auto t = std::make_unique<LynxTables>();
  t->alpha = alpha;
  t->bits = bits;
  const int m = (1 << (bits - 1)) - 1;
  t->max_code = m;
  const double a = alpha;
  const double w = HasKnee(top_width, m) ? top_width : 0.0;
  t->top_width = static_cast<float>(w);
  t->thresholds.assign(m + 1, 0.0f);
  std::vector<double> exact_thresholds(m + 2, 0.0);  // [0] = 0, [M + 1] = 1: edges of the code intervals
  for (int k = 1; k <= m; ++k) {
    exact_thresholds[k] = CurveValue(a, w, m, k - 0.5);
    t->thresholds[k] = static_cast<float>(exact_thresholds[k]);
  }
  exact_thresholds[m + 1] = 1.0;
  t->full_values.resize(m + 1);
  for (int i = 0; i <= m; ++i) t->full_values[i] = static_cast<float>(CurveValue(a, w, m, i));
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

  t->guess_scale = static_cast<float>(m / std::log2(1.0 + a));
  if (w > 0) {
    const double c0 = KneeCode(m);
    const double slope = (m - c0) / w;
    t->guess_alpha = static_cast<float>(a * LogCurveValue(a, m, c0) / (1.0 - w));
    t->knee_slope = static_cast<float>(slope);
    t->knee_offset = static_cast<float>(c0 - (1.0 - w) * slope);
  } else {
    t->guess_alpha = alpha;
    t->knee_slope = 0.0f;
    t->knee_offset = -std::numeric_limits<float>::infinity();
  }
  t->guess_low.assign(m + 1, 0.0f);
  t->guess_high.assign(m + 1, std::numeric_limits<float>::infinity());
  for (int g = 0; g <= m; ++g) {
    t->guess_low[g] = g == 0 ? 0.0f : t->thresholds[g];
    if (g < m) t->guess_high[g] = t->thresholds[g + 1];
  }
  t->log_guess_ok = VerifyLogGuess(*t);
  t->guess_poly = FitPolyGuess(a, t->guess_alpha, m);
  t->poly_guess_ok = VerifyPolyGuess(*t);

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
          v = CurveValue(a, w, m, (low + high) / 2.0);
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

double LogGuess(const LynxTables& t, float a) {
  const float w = 1.0f + t.guess_alpha * a;
  int e;
  const double m = 2.0 * std::frexp(static_cast<double>(w), &e);  // [1, 2)
  const double u = (m - 1.0) / (m + 1.0);
  const double u2 = u * u;
  const double s = 2.0 / std::log(2.0) * u * (1.0 + u2 * (1.0 / 3 + u2 * (1.0 / 5)));
  const double bulk = ((e - 1) + s) * t.guess_scale;
  return std::max(bulk, static_cast<double>(std::fmaf(a, t.knee_slope, t.knee_offset)));
}

float PolyGuess(const LynxTables& t, float a) {
  float p = std::fmaf(a, t.guess_poly[3], t.guess_poly[2]);
  p = std::fmaf(a, p, t.guess_poly[1]);
  p = std::fmaf(a, p, t.guess_poly[0]);
  return std::max(a * p, std::fmaf(a, t.knee_slope, t.knee_offset));
}

void PackEndPairs(const uint32_t* index, size_t n, int bits_per_pair, uint8_t* out) {
  constexpr uint64_t kField = (uint64_t{1} << 23) - 1;
  const uint32_t field = (1u << bits_per_pair) - 1;
  size_t i = 0, o = 0;
  // 23-bit fields: groups of 8 (184 bits, exactly 23 bytes) as three independent 64-bit words, no serial bit
  // counter. Other widths take the loop below from the start.
  for (; bits_per_pair == 23 && i + 8 <= n; i += 8, o += 23) {
    const uint32_t* f = index + i;
    const uint64_t f2 = f[2] & kField, f5 = f[5] & kField;
    const uint64_t w0 = (f[0] & kField) | (f[1] & kField) << 23 | f2 << 46;
    const uint64_t w1 = f2 >> 18 | (f[3] & kField) << 5 | (f[4] & kField) << 28 | f5 << 51;
    const uint64_t w2 = f5 >> 13 | (f[6] & kField) << 10 | (f[7] & kField) << 33;
    std::memcpy(out + o, &w0, 8);
    std::memcpy(out + o + 8, &w1, 8);
    std::memcpy(out + o + 16, &w2, 7);  // little-endian: its low 7 bytes
  }
  // Fields of at most 16 bits: groups of 8 (8 E bits, E bytes) as one 128-bit word, stored 16 bytes at a time while
  // those stay inside the array (the next group's store overwrites the bytes past this one's).
  const size_t total = EndPairBytes(n, bits_per_pair);
  for (; bits_per_pair <= 16 && i + 8 <= n && o + 16 <= total; i += 8, o += bits_per_pair) {
    const uint32_t* f = index + i;
    const int e = bits_per_pair;
    const uint64_t w0 = (f[0] & field) | static_cast<uint64_t>(f[1] & field) << e |
                        static_cast<uint64_t>(f[2] & field) << 2 * e | static_cast<uint64_t>(f[3] & field) << 3 * e;
    const uint64_t w1 = (f[4] & field) | static_cast<uint64_t>(f[5] & field) << e |
                        static_cast<uint64_t>(f[6] & field) << 2 * e | static_cast<uint64_t>(f[7] & field) << 3 * e;
    const unsigned __int128 w = w0 | static_cast<unsigned __int128>(w1) << 4 * e;
    std::memcpy(out + o, &w, 16);
  }
  // The rest from the byte boundary the groups end on, as the same LSB-first stream.
  uint64_t acc = 0;  // pending bits, LSB first
  int bits = 0;
  for (; i < n; ++i) {
    acc |= static_cast<uint64_t>(index[i] & field) << bits;
    bits += bits_per_pair;
    if (bits >= 32) {
      const uint32_t word = static_cast<uint32_t>(acc);
      std::memcpy(out + o, &word, 4);
      o += 4;
      acc >>= 32;
      bits -= 32;
    }
  }
  for (; bits > 0; bits -= 8, acc >>= 8) out[o++] = static_cast<uint8_t>(acc);
}

void UnpackEndPairs(const uint8_t* in, size_t n, int bits_per_pair, uint32_t* index) {
  const size_t bytes = EndPairBytes(n, bits_per_pair);
  const uint32_t field = (1u << bits_per_pair) - 1;
  size_t i = 0;
  // Fields whose 4-byte window lies inside the array: one unaligned load each (a field and its shift, at most
  // 23 + 7 bits, fit the window).
  for (; i < n && (i * bits_per_pair) / 8 + 4 <= bytes; ++i) {
    const size_t bit = i * bits_per_pair;
    uint32_t v;
    std::memcpy(&v, in + bit / 8, 4);
    index[i] = (v >> (bit % 8)) & field;
  }
  for (; i < n; ++i) {
    const size_t bit = i * bits_per_pair;
    uint64_t v = 0;
    for (size_t j = 0; j < 4 && bit / 8 + j < bytes; ++j) v |= static_cast<uint64_t>(in[bit / 8 + j]) << (8 * j);
    index[i] = static_cast<uint32_t>(v >> (bit % 8)) & field;
  }
}

std::vector<float> ConditionalMeanTable(const LynxTables& t, const uint64_t* count, int known) {
  const int unknown = t.bits - known;
  const int cells = 1 << (known - 1);
  const std::vector<float>& centre = t.decode_table(known, AnchorRule::kCodeCentre);
  std::vector<float> table(cells);
  for (int h = 0; h < cells; ++h) {
    double sum = 0;
    uint64_t n = 0;
    for (int i = h << unknown; i < (h + 1) << unknown; ++i) {
      sum += static_cast<double>(count[i]) * static_cast<double>(t.full_values[i]);
      n += count[i];
    }
    table[h] = n == 0 ? centre[h] : static_cast<float>(sum / static_cast<double>(n));
  }
  return table;
}

std::shared_ptr<const LynxTables> GetLynxTables(float alpha, float top_width, int bits) {
  // One entry per (alpha, top_width, bits), built once: building takes tens of milliseconds (the guesses are verified on
  // every probe), and a daemon's first pages of a new alpha arrive on many workers at once, which used to build
  // a copy each and slow one another down. Past kMaxCached keys, tables are built per call and not kept.
  struct Entry {
    std::once_flag once;
    std::shared_ptr<const LynxTables> tables;
  };
  static absl::Mutex mu;
  static auto* cache = new std::map<std::tuple<uint32_t, uint32_t, int>, std::shared_ptr<Entry>>();
  constexpr size_t kMaxCached = 256;
  if (!HasKnee(top_width, (1 << (bits - 1)) - 1)) top_width = 0.0f;  // one entry for what builds the same tables
  uint32_t alpha_bits, width_bits;
  std::memcpy(&alpha_bits, &alpha, 4);
  std::memcpy(&width_bits, &top_width, 4);
  const auto key = std::make_tuple(alpha_bits, width_bits, bits);
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu);
    auto it = cache->find(key);
    if (it != cache->end()) {
      entry = it->second;
    } else if (cache->size() < kMaxCached) {
      entry = std::make_shared<Entry>();
      cache->emplace(key, entry);
    }
  }
  if (entry == nullptr) return BuildTables(alpha, top_width, bits);
  std::call_once(entry->once, [&] { entry->tables = BuildTables(alpha, top_width, bits); });
  return entry->tables;
}

}  // namespace kvt::codec::internal
