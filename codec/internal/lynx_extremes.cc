#include "codec/internal/lynx_extremes.h"

#include "codec/internal/lynx_math.h"

namespace kvt::codec::internal {
namespace {

// A channel's state while a chunk is scanned, kept in its output slot: kNoExtreme (no match yet), the row of
// the only match so far, or kSeveral.
constexpr int16_t kSeveral = -2;

inline void Track(bool match, int r, int16_t& state) {
  if (match) state = state == kNoExtreme ? static_cast<int16_t>(r) : kSeveral;
}

void Finish(int channels, int16_t* pos, int16_t* neg) {
  for (int c = 0; c < channels; ++c) {
    if (pos[c] == kSeveral) pos[c] = kNoExtreme;
    if (neg[c] == kSeveral) neg[c] = kNoExtreme;
  }
}

}  // namespace

void RefChunkExtremes(const uint8_t* prefix, size_t row_stride, int rows, int channels, uint8_t top_pos,
                      uint8_t top_neg, int16_t* pos, int16_t* neg) {
  for (int c = 0; c < channels; ++c) pos[c] = neg[c] = kNoExtreme;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = prefix + static_cast<size_t>(r) * row_stride;
    for (int c = 0; c < channels; ++c) {
      Track(row[c] == top_pos, r, pos[c]);
      Track(row[c] == top_neg, r, neg[c]);
    }
  }
  Finish(channels, pos, neg);
}

void RefChunkExtremesNibbles(const uint8_t* packed, int rows, int channels, int16_t* pos, int16_t* neg) {
  const size_t row_bytes = static_cast<size_t>(channels) / 2;
  for (int c = 0; c < channels; ++c) pos[c] = neg[c] = kNoExtreme;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = packed + static_cast<size_t>(r) * row_bytes;
    for (int c = 0; c < channels; ++c) {
      const uint8_t p = (c & 1) ? (row[c / 2] >> 4) : (row[c / 2] & 0x0F);
      Track(p == TopCellPositive(4), r, pos[c]);
      Track(p == TopCellNegative(4), r, neg[c]);
    }
  }
  Finish(channels, pos, neg);
}

void RefApplyChunkExtremesRange(const int16_t* pos, const int16_t* neg, int k, float top, const LynxPageMeta& meta,
                                const MutablePageView& out, int c_begin, int c_end) {
  const int t0 = k * meta.chunk_len;
  const size_t base = static_cast<size_t>(k) * meta.channels;
  for (int c = c_begin; c < c_end; ++c) {
    if (pos[c] == kNoExtreme && neg[c] == kNoExtreme) continue;
    const float mu = meta.mu[base + c], sigma = meta.sigma[base + c];
    if (pos[c] != kNoExtreme) out.at(t0 + pos[c], c) = Reconstruct(top, mu, sigma, meta.frames[c]);
    if (neg[c] != kNoExtreme) out.at(t0 + neg[c], c) = Reconstruct(-top, mu, sigma, meta.frames[c]);
  }
}

void RefApplyChunkExtremes(const int16_t* pos, const int16_t* neg, int k, float top, const LynxPageMeta& meta,
                           const MutablePageView& out) {
  RefApplyChunkExtremesRange(pos, neg, k, top, meta, out, 0, meta.channels);
}

}  // namespace kvt::codec::internal
