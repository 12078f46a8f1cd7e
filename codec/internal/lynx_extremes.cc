#include "codec/internal/lynx_extremes.h"

#include <cstring>
#include <vector>

#include "codec/internal/bitpack.h"
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

namespace {

// 0x80 in every zero byte of v, 0 elsewhere (exact: no borrow reaches a neighbouring byte).
inline uint64_t ZeroBytes(uint64_t v) {
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full;
  return ~(((v & kLow7) + kLow7) | v | kLow7);
}

}  // namespace

size_t RefChunkSampledSingles(const uint8_t* codes, int rows, int channels, uint8_t high, uint8_t top_pos,
                              uint8_t top_neg, int phase, uint32_t* out) {
  constexpr uint64_t kBytes = 0x0101010101010101ull;
  const uint64_t h = high * kBytes, tp = top_pos * kBytes, tn = top_neg * kBytes;
  const size_t row_bytes = static_cast<size_t>(channels);
  const int first_sampled = FirstSampledRow(phase);
  const int blocks = (channels + 7) / 8;
  // Byte e of a block's masks: 0x80 where channel 8 b + e's value in row r is the top cell of that sign.
  auto matches = [&](int r, int b, uint64_t& pos, uint64_t& neg) {
    const int c0 = 8 * b;
    uint64_t x = 0;  // zero padding past the row's end, masked out of the singles below
    std::memcpy(&x, codes + r * row_bytes + c0, channels - c0 < 8 ? channels - c0 : 8);
    x &= h;
    pos = ZeroBytes(x ^ tp);
    neg = ZeroBytes(x ^ tn);
  };
  // Pass 1, per block of 8 channels: "seen once" / "seen again" over the chunk's rows.
  thread_local std::vector<uint64_t> singles;  // per block: positive then negative single masks
  singles.resize(2 * static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) {
    SeenMasks<uint64_t> seen_p, seen_n;
    for (int r = 0; r < rows; ++r) {
      uint64_t pos, neg;
      matches(r, b, pos, neg);
      seen_p.Add(pos);
      seen_n.Add(neg);
    }
    const int width = channels - 8 * b < 8 ? channels - 8 * b : 8;
    const uint64_t valid = width == 8 ? ~0ull : (1ull << (8 * width)) - 1;
    singles[2 * b] = seen_p.Single() & valid;
    singles[2 * b + 1] = seen_n.Single() & valid;
  }
  // Pass 2, the sampled rows in order: their values that are single.
  size_t n = 0;
  for (int r = first_sampled; r < rows; r += kAnchorSampleStride) {
    for (int b = 0; b < blocks; ++b) {
      if ((singles[2 * b] | singles[2 * b + 1]) == 0) continue;
      uint64_t pos, neg;
      matches(r, b, pos, neg);
      for (uint64_t m = (pos & singles[2 * b]) | (neg & singles[2 * b + 1]); m != 0; m &= m - 1) {
        out[n++] = static_cast<uint32_t>(r * row_bytes + 8 * b + __builtin_ctzll(m) / 8);
      }
    }
  }
  return n;
}

void ExcludeSingleExtremes(const uint8_t* codes, const uint8_t* const* nibbles, int bits, int known,
                           const LynxKernels& kernels, const LynxPageMeta& meta, uint64_t* count) {
  const size_t channels = static_cast<size_t>(meta.channels);
  const int sampled = AnchorSampledChannels(meta.channels);  // the tables' channels: [0, sampled)
  const size_t chunk_values = static_cast<size_t>(meta.chunk_len) * channels;
  const int max_code = (1 << (bits - 1)) - 1;
  // The chunk's prefixes in those channels, `sampled` bytes a row, when they are not already laid out so: the
  // packed path's anchor nibbles (a byte each), or the first channels of wider rows.
  thread_local std::vector<uint8_t> rows;
  thread_local std::vector<uint32_t> singles;
  const bool compact = codes == nullptr || sampled < meta.channels;
  if (compact) rows.resize(static_cast<size_t>(meta.chunk_len) * sampled);
  singles.resize(2 * static_cast<size_t>(sampled));
  const int shift = codes != nullptr ? bits - known : 0;
  const uint8_t high = static_cast<uint8_t>(0xFFu << shift);
  const uint8_t top_pos = static_cast<uint8_t>(TopCellPositive(known) << shift);
  const uint8_t top_neg = static_cast<uint8_t>(TopCellNegative(known) << shift);
  for (int k = 0; k < meta.num_chunks; ++k) {
    const size_t first = static_cast<size_t>(k) * chunk_values;  // the chunk's first value
    const uint8_t* prefix = rows.data();
    if (!compact) {
      prefix = codes + first;
    } else {
      for (int r = 0; r < meta.chunk_len; ++r) {
        const size_t row = first + static_cast<size_t>(r) * channels;
        uint8_t* dst = rows.data() + static_cast<size_t>(r) * sampled;
        if (codes != nullptr) {
          std::memcpy(dst, codes + row, static_cast<size_t>(sampled));
        } else {  // whole bytes: rows start on even values, as channels is even
          AppendField(nibbles[0] + row / 2, static_cast<size_t>(sampled), 4, true, dst);
        }
      }
    }
    const int phase = static_cast<int>((static_cast<size_t>(k) * meta.chunk_len) % kAnchorSampleStride);
    const size_t n = kernels.chunk_sampled_singles(prefix, meta.chunk_len, sampled, high, top_pos, top_neg, phase,
                                                   singles.data());
    for (size_t j = 0; j < n; ++j) {
      const size_t r = singles[j] / sampled, c = singles[j] % sampled;
      if (meta.spikes && meta.spike_index[k * channels + c] == r) continue;  // not counted in the first place
      const size_t i = first + r * channels + c;
      --count[CodeAt(codes, nibbles, i) & max_code];
    }
  }
}

}  // namespace kvt::codec::internal
