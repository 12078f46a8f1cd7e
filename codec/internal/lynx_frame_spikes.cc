#include "codec/internal/lynx_frame_spikes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/internal/bitpack.h"
#include "codec/scheme.h"

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

// Channel c's spikes from its lists (bottom = S[0..k], top = S[n-1], ..., S[n-1-k]): the removal with the
// narrowest range, stored by increasing token.
// Returns how many come from the bottom.
int StoreChannelSpikes(const Entry* bottom, const Entry* top, int c, LynxPageMeta& meta) {
  const int k = meta.frame_spikes;
  int best = 0;
  double best_range = 0;
  for (int i = 0; i <= k; ++i) {
    const double range = static_cast<double>(top[k - i].x) - static_cast<double>(bottom[i].x);
    if (i == 0 || range < best_range) {
      best = i;
      best_range = range;
    }
  }
  Entry spikes[kMaxFrameSpikes];
  int m = 0;
  for (int j = 0; j < best; ++j) spikes[m++] = bottom[j];
  for (int j = 0; j < k - best; ++j) spikes[m++] = top[j];
  for (int i = 1; i < k; ++i) {  // by token (insertion sort: k <= 7)
    for (int j = i; j > 0 && spikes[j - 1].t > spikes[j].t; --j) std::swap(spikes[j - 1], spikes[j]);
  }
  const size_t channels = static_cast<size_t>(meta.channels);
  for (int j = 0; j < k; ++j) {
    meta.frame_token[j * channels + c] = static_cast<uint16_t>(spikes[j].t);
    meta.frame_value[j * channels + c] = spikes[j].x;
  }
  return best;
}

// The `keep` first (value, token) entries offered, in any order: ascending (kUp) or descending order.
template <bool kUp>
class EntryList {
 public:
  explicit EntryList(int keep) : keep_(keep) {}
  void Offer(float x, int t) {
    int at = n_;
    while (at > 0 && Before(x, t, list_[at - 1])) --at;
    if (at == keep_) return;
    if (n_ < keep_) ++n_;
    for (int j = n_ - 1; j > at; --j) list_[j] = list_[j - 1];
    list_[at] = Entry{x, t};
  }
  const Entry* entries() const { return list_; }

 private:
  static bool Before(float x, int t, const Entry& e) {
    return kUp ? (x < e.x || (x == e.x && t < e.t)) : (x > e.x || (x == e.x && t > e.t));
  }
  int keep_;
  int n_ = 0;
  Entry list_[kMaxList];
};

// The token whose value replaces frame spike j of channel c: the first token of its chunk that is not a spike
// (the channel's spike tokens increase with j).
int SubstituteToken(const LynxPageMeta& meta, int j, int c) {
  const size_t channels = static_cast<size_t>(meta.channels);
  const int t = meta.frame_token[j * channels + c];
  int r = t / meta.chunk_len * meta.chunk_len;
  for (int i = 0; i < meta.frame_spikes; ++i) {
    if (meta.frame_token[i * channels + c] == r) ++r;
  }
  return r;
}

}  // namespace

void SelectFrameSpikes(const PageView& page, LynxPageMeta& meta) {
  const int k = meta.frame_spikes;
  const int channels = page.channels;
  if (k == 0) return;
  Extremes e(channels, k + 1);
  for (int t = 0; t < page.tokens; ++t) {
    ScanRowScalar(page.data + static_cast<size_t>(t) * page.stride(), t, 0, channels, e);
  }
  for (int c = 0; c < channels; ++c) StoreChannelSpikes(e.bottom(c), e.top(c), c, meta);
}

void MaskFrameSpikes(const PageView& page, const LynxPageMeta& meta, float* masked) {
  const size_t channels = static_cast<size_t>(page.channels);
  for (int t = 0; t < page.tokens; ++t) {
    std::copy_n(page.data + static_cast<size_t>(t) * page.stride(), channels, masked + t * channels);
  }
  for (int c = 0; c < page.channels; ++c) {
    for (int j = 0; j < meta.frame_spikes; ++j) {
      const int t = meta.frame_token[j * channels + c];
      masked[static_cast<size_t>(t) * channels + c] = page.at(SubstituteToken(meta, j, c), c);
    }
  }
}

void ChunkExtremes::Resize(size_t n, bool mean) {
  min.resize(n);
  min2.resize(n);
  max.resize(n);
  max2.resize(n);
  argmin.resize(n);
  argmax.resize(n);
  sum.resize(mean ? n : 0);
}

bool ScanChunkExtremes(const PageView& page, const LynxPageMeta& meta, Centering centering, int c_begin, int c_end,
                       ChunkExtremes& e) {
  const int n = meta.chunk_len;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int k = 0; k < meta.num_chunks; ++k) {
    for (int c = c_begin; c < c_end; ++c) {
      float mn = kInf, mn2 = kInf, mx = -kInf, mx2 = -kInf, sum = 0.0f;
      int tmn = 0, tmx = 0;
      for (int r = 0; r < n; ++r) {
        const float x = page.at(k * n + r, c);
        if (!std::isfinite(x)) return false;
        mn2 = std::min(mn2, std::max(mn, x));  // the least of the values but the least
        mx2 = std::max(mx2, std::min(mx, x));
        if (x < mn) mn = x, tmn = r;  // the first of equal values stays
        if (x >= mx) mx = x, tmx = r;  // the last of equal values wins
        if (centering == Centering::kMean) {
          const float term = x * inv_n;
          sum = sum + term;
        }
      }
      const size_t i = static_cast<size_t>(k) * meta.channels + c;
      e.min[i] = mn;
      e.min2[i] = mn2;
      e.max[i] = mx;
      e.max2[i] = mx2;
      e.argmin[i] = static_cast<uint8_t>(tmn);
      e.argmax[i] = static_cast<uint8_t>(tmx);
      if (centering == Centering::kMean) e.sum[i] = sum;
    }
  }
  return true;
}

void ChannelCandidateChunks(const ChunkExtremes& e, const LynxPageMeta& meta, int c, int* bottom, int* top) {
  const int keep = std::min(meta.frame_spikes + 1, meta.num_chunks);
  int nb = 0, nt = 0;
  for (int k = 0; k < meta.num_chunks; ++k) {
    const size_t i = static_cast<size_t>(k) * meta.channels + c;
    auto at = [&](int chunk) { return static_cast<size_t>(chunk) * meta.channels + c; };
    // A later chunk enters the bottom list only below the last kept (equal values: the earlier token first) and
    // the top list at or above it (the later token first).
    int j = nb;
    while (j > 0 && e.min[at(bottom[j - 1])] > e.min[i]) --j;
    if (j < keep) {
      for (int m = std::min(nb, keep - 1); m > j; --m) bottom[m] = bottom[m - 1];
      bottom[j] = k;
      nb = std::min(nb + 1, keep);
    }
    j = nt;
    while (j > 0 && e.max[at(top[j - 1])] <= e.max[i]) --j;
    if (j < keep) {
      for (int m = std::min(nt, keep - 1); m > j; --m) top[m] = top[m - 1];
      top[j] = k;
      nt = std::min(nt + 1, keep);
    }
  }
}

namespace {

// One side of SelectChannelFrameSpikes: the k + 1 first entries of channel c's order (kUp: ascending, from the
// least values; else descending). A candidate chunk offers only its own extreme when its next value lies strictly
// beyond the last candidate's extreme (then no other value of it can come first: there are k + 1 entries up to
// that extreme), and else every value; without k + 1 candidates every chunk offers every value.
template <bool kUp>
void ChannelSide(const PageView& page, const ChunkExtremes& e, const LynxPageMeta& meta, const int* chunks, int c,
                 Entry* out) {
  const int k = meta.frame_spikes;
  const int n = meta.chunk_len;
  const int keep = std::min(k + 1, meta.num_chunks);
  const std::vector<float>& ext = kUp ? e.min : e.max;
  const std::vector<float>& next = kUp ? e.min2 : e.max2;
  const std::vector<uint8_t>& arg = kUp ? e.argmin : e.argmax;
  auto at = [&](int chunk) { return static_cast<size_t>(chunk) * meta.channels + c; };
  const float cut = ext[at(chunks[keep - 1])];
  EntryList<kUp> list(k + 1);
  for (int j = 0; j < keep; ++j) {
    const size_t i = at(chunks[j]);
    if (keep == k + 1 && (j == k || (kUp ? next[i] > cut : next[i] < cut))) {
      list.Offer(ext[i], chunks[j] * n + arg[i]);
    } else {
      for (int t = chunks[j] * n; t < (chunks[j] + 1) * n; ++t) list.Offer(page.at(t, c), t);
    }
  }
  std::copy_n(list.entries(), k + 1, out);
}

}  // namespace

void SelectChannelFrameSpikes(const PageView& page, Centering centering, const int* bottom, const int* top, int c,
                              ChunkExtremes& e, LynxPageMeta& meta) {
  const int k = meta.frame_spikes;
  const int n = meta.chunk_len;
  Entry low[kMaxList], high[kMaxList];
  ChannelSide<true>(page, e, meta, bottom, c, low);
  ChannelSide<false>(page, e, meta, top, c, high);
  const int best = StoreChannelSpikes(low, high, c, meta);
  // The masked page's channel range: its least and greatest values that are not spikes (substitutes are such
  // values), S[best] and S[n - 1 - (k - best)] (n > k: never a spike of the other side); zeros as +0.
  meta.lo[c] = low[best].x == 0.0f ? 0.0f : low[best].x;
  meta.hi[c] = high[k - best].x == 0.0f ? 0.0f : high[k - best].x;
  // The masked min and max (and sum) of each chunk that holds a spike (a chunk's spikes are adjacent in j). When
  // its spikes are its least value's first token and/or its greatest's last (its ChunkExtremes tokens), those are
  // its next values (a chunk with two spikes has at least 3 values); else, and for the sum, the chunk is re-read.
  const size_t channels = static_cast<size_t>(meta.channels);
  auto at = [&](int chunk) { return static_cast<size_t>(chunk) * channels + c; };
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int j = 0; j < k;) {
    const int chunk = meta.frame_token[j * channels + c] / n;
    const size_t i = at(chunk);
    int end = j;
    bool is_min = false, is_max = false, other = false;
    for (; end < k && meta.frame_token[end * channels + c] / n == chunk; ++end) {
      const int r = meta.frame_token[end * channels + c] - chunk * n;
      if (r == e.argmin[i] && !is_min) {
        is_min = true;
      } else if (r == e.argmax[i] && !is_max) {
        is_max = true;
      } else {
        other = true;
      }
    }
    if (!other && centering == Centering::kMidrange) {
      if (is_min) e.min[i] = e.min2[i];
      if (is_max) e.max[i] = e.max2[i];
    } else {
      const float sub = page.at(SubstituteToken(meta, j, c), c);
      float mn = kInf, mx = -kInf, sum = 0.0f;
      int spike = j;  // the chunk's next spike
      for (int t = chunk * n; t < (chunk + 1) * n; ++t) {
        float x = page.at(t, c);
        if (spike < end && meta.frame_token[spike * channels + c] == t) x = sub, ++spike;
        mn = std::min(mn, x);
        mx = std::max(mx, x);
        const float term = x * inv_n;
        sum = sum + term;
      }
      e.min[i] = mn;
      e.max[i] = mx;
      if (centering == Centering::kMean) e.sum[i] = sum;
    }
    j = end;
  }
}

void CopyFrameSpikeCodes(const LynxPageMeta& meta, uint8_t* codes) {
  const size_t channels = static_cast<size_t>(meta.channels);
  for (int c = 0; c < meta.channels; ++c) {
    for (int j = 0; j < meta.frame_spikes; ++j) {
      const size_t t = meta.frame_token[j * channels + c];
      codes[t * channels + c] = codes[static_cast<size_t>(SubstituteToken(meta, j, c)) * channels + c];
    }
  }
}

void CopyFrameSpikeNibbles(const LynxPageMeta& meta, int num_streams, uint8_t* const* streams) {
  const size_t channels = static_cast<size_t>(meta.channels);
  for (int c = 0; c < meta.channels; ++c) {
    for (int j = 0; j < meta.frame_spikes; ++j) {
      const size_t to = meta.frame_token[j * channels + c] * channels + c;
      const size_t from = static_cast<size_t>(SubstituteToken(meta, j, c)) * channels + c;
      for (int s = 0; s < num_streams; ++s) {  // value i's nibble: byte i / 2, the high one for odd i
        const int nibble = NibbleAt(streams[s], from);
        uint8_t& byte = streams[s][to / 2];
        byte = static_cast<uint8_t>((byte & (0xF0 >> (4 * (to % 2)))) | (nibble << (4 * (to % 2))));
      }
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
