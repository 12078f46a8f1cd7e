#include "codec/internal/lynx_frame_spikes.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/scheme.h"

#define KVT_FRAME_AVX512 __attribute__((target("avx512f")))

namespace kvt::codec::internal {
namespace {

constexpr int kMaxList = kMaxFrameSpikes + 1;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Entry {
  float x;
  int t;
};

// Per channel, the k + 1 first and the k + 1 last values of the (value, token) order seen so far, and the
// thresholds a new (later) token must pass to enter them: x < bottom_cut (its value below the last kept; an
// equal value sorts after, being later) and x >= top_cut. The cuts stay +-inf until a list is full.
class Extremes {
 public:
  Extremes(int channels, int keep)
      : keep_(keep),
        bottom_(static_cast<size_t>(channels) * kMaxList),
        top_(bottom_.size()),
        bottom_n_(channels, 0),
        top_n_(channels, 0),
        bottom_cut_(channels, kInf),
        top_cut_(channels, -kInf) {}

  const float* bottom_cut() const { return bottom_cut_.data(); }
  const float* top_cut() const { return top_cut_.data(); }

  // Offers value x of token t (later than every token offered before) in channel c.
  void Offer(int c, float x, int t) {
    if (x < bottom_cut_[c]) InsertBottom(c, x, t);
    if (x >= top_cut_[c]) InsertTop(c, x, t);
  }

  const Entry* bottom(int c) const { return &bottom_[static_cast<size_t>(c) * kMaxList]; }
  const Entry* top(int c) const { return &top_[static_cast<size_t>(c) * kMaxList]; }

 private:
  void InsertBottom(int c, float x, int t) {
    Entry* list = &bottom_[static_cast<size_t>(c) * kMaxList];
    int n = bottom_n_[c];
    int at = n;
    while (at > 0 && list[at - 1].x > x) --at;  // ascending; an equal value stays ahead (earlier token)
    if (n == keep_) --n;                         // the last falls off
    for (int j = n; j > at; --j) list[j] = list[j - 1];
    list[at] = Entry{x, t};
    bottom_n_[c] = n + 1;
    if (n + 1 == keep_) bottom_cut_[c] = list[keep_ - 1].x;
  }
  void InsertTop(int c, float x, int t) {
    Entry* list = &top_[static_cast<size_t>(c) * kMaxList];
    int n = top_n_[c];
    int at = n;
    while (at > 0 && list[at - 1].x <= x) --at;  // descending; an equal value goes ahead (later token)
    if (n == keep_) --n;
    for (int j = n; j > at; --j) list[j] = list[j - 1];
    list[at] = Entry{x, t};
    top_n_[c] = n + 1;
    if (n + 1 == keep_) top_cut_[c] = list[keep_ - 1].x;
  }

  int keep_;
  std::vector<Entry> bottom_, top_;
  std::vector<int> bottom_n_, top_n_;
  std::vector<float> bottom_cut_, top_cut_;
};

void ScanRowScalar(const float* row, int t, int c_begin, int c_end, Extremes& e) {
  for (int c = c_begin; c < c_end; ++c) e.Offer(c, row[c], t);
}

// The same offers, 16 channels compared at once: only the lanes that pass a cut are offered (the others would
// not be inserted), in channel order.
KVT_FRAME_AVX512 int ScanRowAvx512(const float* row, int t, int channels, Extremes& e) {
  int c0 = 0;
  for (; c0 + 16 <= channels; c0 += 16) {
    const __m512 x = _mm512_loadu_ps(row + c0);
    const __mmask16 pass = _mm512_cmp_ps_mask(x, _mm512_loadu_ps(e.bottom_cut() + c0), _CMP_LT_OQ) |
                           _mm512_cmp_ps_mask(x, _mm512_loadu_ps(e.top_cut() + c0), _CMP_GE_OQ);
    for (unsigned m = pass; m != 0; m &= m - 1) {
      const int c = c0 + __builtin_ctz(m);
      e.Offer(c, row[c], t);
    }
  }
  return c0;
}

}  // namespace

void SelectFrameSpikes(const PageView& page, bool avx512, LynxPageMeta& meta) {
  const int k = meta.frame_spikes;
  const int channels = page.channels;
  if (k == 0) return;
  Extremes e(channels, k + 1);
  for (int t = 0; t < page.tokens; ++t) {
    const float* row = page.data + static_cast<size_t>(t) * page.stride();
    const int c0 = avx512 ? ScanRowAvx512(row, t, channels, e) : 0;
    ScanRowScalar(row, t, c0, channels, e);
  }
  int tokens[kMaxFrameSpikes];
  for (int c = 0; c < channels; ++c) {
    const Entry* bottom = e.bottom(c);  // S[0..k]
    const Entry* top = e.top(c);        // S[n-1], S[n-2], ..., S[n-1-k]
    int best = 0;
    double best_range = 0;
    for (int i = 0; i <= k; ++i) {
      const double range = static_cast<double>(top[k - i].x) - static_cast<double>(bottom[i].x);
      if (i == 0 || range < best_range) {
        best = i;
        best_range = range;
      }
    }
    int m = 0;
    for (int j = 0; j < best; ++j) tokens[m++] = bottom[j].t;
    for (int j = 0; j < k - best; ++j) tokens[m++] = top[j].t;
    std::sort(tokens, tokens + k);
    for (int j = 0; j < k; ++j) {
      const size_t s = static_cast<size_t>(j) * channels + c;
      meta.frame_token[s] = static_cast<uint16_t>(tokens[j]);
      meta.frame_value[s] = page.at(tokens[j], c);
    }
  }
}

void MaskFrameSpikes(const PageView& page, const LynxPageMeta& meta, float* masked) {
  const size_t channels = static_cast<size_t>(page.channels);
  for (int t = 0; t < page.tokens; ++t) {
    std::copy_n(page.data + static_cast<size_t>(t) * page.stride(), channels, masked + t * channels);
  }
  const int k = meta.frame_spikes;
  for (int c = 0; c < page.channels; ++c) {
    for (int j = 0; j < k; ++j) {
      const int t = meta.frame_token[static_cast<size_t>(j) * channels + c];
      // The first token of t's chunk that is not a spike (the channel's spike tokens increase with j).
      const int t0 = t / meta.chunk_len * meta.chunk_len;
      int r = t0;
      for (int i = 0; i < k; ++i) {
        if (meta.frame_token[static_cast<size_t>(i) * channels + c] == r) ++r;
      }
      masked[static_cast<size_t>(t) * channels + c] = page.at(r, c);
    }
  }
}

absl::Status CheckFrameSpikes(const LynxPageMeta& meta) {
  const size_t channels = static_cast<size_t>(meta.channels);
  for (int c = 0; c < meta.channels; ++c) {
    int last = -1;
    for (int j = 0; j < meta.frame_spikes; ++j) {
      const size_t s = j * channels + c;
      const int t = meta.frame_token[s];
      if (t <= last || t >= meta.tokens || !std::isfinite(meta.frame_value[s])) {
        return absl::DataLossError(absl::StrCat("lynx container: bad frame spike ", j, " of channel ", c, " (token ",
                                                t, ", value ", meta.frame_value[s], ") in a ", meta.tokens,
                                                "-token page"));
      }
      last = t;
    }
  }
  return absl::OkStatus();
}

void ApplyFrameSpikes(const LynxPageMeta& meta, const MutablePageView& out) {
  const size_t channels = static_cast<size_t>(meta.channels);
  for (int j = 0; j < meta.frame_spikes; ++j) {
    for (int c = 0; c < meta.channels; ++c) {
      const size_t s = j * channels + c;
      out.at(meta.frame_token[s], c) = meta.frame_value[s];
    }
  }
}

}  // namespace kvt::codec::internal
