#include "codec/internal/lynx_codec.h"

#include <cmath>
#include <cstring>
#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/internal/bitpack.h"
#include "codec/internal/lynx_extremes.h"
#include "codec/internal/lynx_frame_spikes.h"
#include "codec/internal/lynx_math.h"

namespace kvt::codec::internal {
namespace {

// A per-thread buffer of n T's, so a hot encode/decode loop does not page-fault a fresh one per call (one buffer
// per T and thread; at most one ThreadScratch<T> alive per thread). Buffers over 16 MiB are released after use.
template <typename T>
class ThreadScratch {
 public:
  explicit ThreadScratch(size_t n) : buf_(Buffer()) { buf_.resize(n); }
  ~ThreadScratch() {
    if (buf_.capacity() * sizeof(T) > (size_t{16} << 20)) std::vector<T>().swap(buf_);
  }
  T* data() { return buf_.data(); }

 private:
  static std::vector<T>& Buffer() {
    thread_local std::vector<T> buffer;
    return buffer;
  }
  std::vector<T>& buf_;
};
using CodeScratch = ThreadScratch<uint8_t>;  // the page's code bytes
using MaskScratch = ThreadScratch<float>;    // a page with its frame spikes masked (lynx_frame_spikes.h)

// Per-thread page metadata and end-pair scratch, reused for the same reason (a page's worth of small vectors
// would otherwise be allocated, zeroed and faulted in per call). Released when large.
class MetaScratch {
 public:
  MetaScratch() : meta_(Meta()), pairs_(Pairs()) {}
  ~MetaScratch() {
    if (meta_.mu.capacity() > (size_t{1} << 20)) meta_ = LynxPageMeta();
    if (pairs_.capacity() > (size_t{1} << 20)) std::vector<uint32_t>().swap(pairs_);
  }
  LynxPageMeta& meta() { return meta_; }
  uint32_t* pairs(size_t n) {
    pairs_.resize(n);
    return pairs_.data();
  }

 private:
  static LynxPageMeta& Meta() {
    thread_local LynxPageMeta meta;
    return meta;
  }
  static std::vector<uint32_t>& Pairs() {
    thread_local std::vector<uint32_t> pairs;
    return pairs;
  }
  LynxPageMeta& meta_;
  std::vector<uint32_t>& pairs_;
};

// Whether every stage of `stages` (from the first) is 4 bits wide: the fused nibble kernels' schemes.
bool NibbleStages(const Scheme& scheme, int stages) {
  for (int i = 0; i < stages; ++i) {
    if (scheme.stage_bits[i] != 4) return false;
  }
  return true;
}

struct MetaOffsets {
  size_t lo, hi, ends, spike_value, spike_index, frame_value, frame_token, tables, codes;
};

// Stream 0's parts (docs/FORMAT.md "lynx family"), `frame_values` = frame spikes per channel x channels.
MetaOffsets Offsets(const Scheme& scheme, int channels, size_t chunk_values, size_t frame_values) {
  const bool spikes = scheme.spike_reserve;
  MetaOffsets o;
  o.lo = 0;
  o.hi = o.lo + 4 * static_cast<size_t>(channels);
  o.ends = o.hi + 4 * static_cast<size_t>(channels);
  o.spike_value = o.ends + EndPairBytes(chunk_values, scheme.end_pair_bits);
  o.spike_index = o.spike_value + (spikes ? 4 * chunk_values : 0);
  o.frame_value = o.spike_index + (spikes ? chunk_values : 0);
  o.frame_token = o.frame_value + 4 * frame_values;
  o.tables = o.frame_token + 2 * frame_values;
  o.codes = o.tables + 4 * LynxAnchorTableFloats(scheme);
  return o;
}

// The histogram of magnitude codes I = code & M over the page's sampled values (lynx_math.h: tokens t %
// kAnchorSampleStride == 0 of the first AnchorSampledChannels channels), spikes excluded: integer counts, so
// every implementation gets the same table whatever order it counts in. The codes come as token-major code
// bytes (`codes`) or, with codes == nullptr, as lynx's two packed 4-bit streams (nibbles[0] the code's high
// nibbles, nibbles[1] its low ones; no spikes).
std::vector<uint64_t> MagnitudeHistogram(const uint8_t* codes, const uint8_t* const* nibbles,
                                         const LynxPageMeta& meta, int max_code) {
  const size_t channels = static_cast<size_t>(meta.channels);
  const int sampled = AnchorSampledChannels(meta.channels);
  std::vector<uint64_t> count(static_cast<size_t>(max_code) + 1, 0);
  for (int t = 0; t < meta.tokens; t += kAnchorSampleStride) {
    const size_t row = static_cast<size_t>(t) * channels;
    for (int c = 0; c < sampled; ++c) ++count[CodeAt(codes, nibbles, row + c) & max_code];
  }
  if (meta.spikes) {
    for (int k = 0; k < meta.num_chunks; ++k) {
      for (int c = 0; c < sampled; ++c) {
        const size_t s = static_cast<size_t>(k) * meta.channels + c;
        const size_t t = static_cast<size_t>(k) * meta.chunk_len + meta.spike_index[s];
        if (t % kAnchorSampleStride == 0) --count[CodeAt(codes, nibbles, t * channels + c) & max_code];
      }
    }
  }
  return count;
}

// The exact-extremes rule (lynx_extremes.h) over every chunk of a partial decode, from the `known`-bit prefixes
// (token-major bytes). The fused nibble kernel applies it itself.
void ApplyExactExtremes(const uint8_t* prefix, int known, float top, const LynxKernels& kernels,
                        const LynxPageMeta& meta, const MutablePageView& out) {
  const size_t channels = static_cast<size_t>(meta.channels);
  const size_t chunk_values = static_cast<size_t>(meta.chunk_len) * channels;
  // Per-thread, like the other decode scratch: no allocation per page (at most 2 x 64 Ki int16).
  thread_local std::vector<int16_t> scratch;
  scratch.resize(2 * channels);
  int16_t* pos = scratch.data();
  int16_t* neg = pos + channels;
  for (int k = 0; k < meta.num_chunks; ++k) {
    kernels.chunk_extremes(prefix + k * chunk_values, channels, meta.chunk_len, meta.channels,
                           TopCellPositive(known), TopCellNegative(known), pos, neg);
    kernels.apply_chunk_extremes(pos, neg, k, top, meta, out);
  }
}

}  // namespace

bool EncodeLynx(const Scheme& scheme, const CodecOptions& options, const PageView& input, const LynxKernels& kernels,
                const std::array<uint8_t*, kMaxStreams>& streams) {
  const int bits = scheme.total_code_bits();
  const auto tables = GetLynxTables(options.alpha, options.top_width, bits);
  const int chunk_len = input.tokens < options.chunk_tokens ? input.tokens : options.chunk_tokens;
  MetaScratch scratch;
  LynxPageMeta& meta = scratch.meta();
  meta.Resize(input.tokens, input.channels, chunk_len, scheme.spike_reserve, scheme.end_pair_bits,
              PageFrameSpikes(scheme, input.tokens, options.chunk_tokens));
  // With frame spikes, everything below codes the page with them masked: a masked copy, or (stats_frame_spikes)
  // the unmasked page with the spikes' codes copied from their substitutes' afterwards.
  PageView page = input;
  const bool masked_copy = meta.frame_spikes > 0 && kernels.stats_frame_spikes == nullptr;
  MaskScratch masked(masked_copy ? input.num_values() : 0);
  if (masked_copy) {
    if (!kernels.all_finite(input)) return false;
    SelectFrameSpikes(input, meta);
    MaskFrameSpikes(input, meta, masked.data());
    page = PageView{masked.data(), input.tokens, input.channels, 0};
  }
  if (scheme.spike_reserve) {
    if (!kernels.all_finite(page)) return false;
    SpikeStats(page, options.centering, meta);
  } else if (meta.frame_spikes > 0 && !masked_copy) {
    if (!kernels.stats_frame_spikes(page, options.centering, meta)) return false;
  } else if (!kernels.stats(page, options.centering, meta)) {
    return false;
  }
  if (scheme.spike_reserve || !kernels.stats_derive) kernels.derive(meta);

  const size_t n = page.num_values();
  const size_t chunk_values = meta.q_low.size();
  const MetaOffsets o = Offsets(scheme, page.channels, chunk_values, meta.frame_token.size());
  uint8_t* s0 = streams[0];
  // The fused kernel writes the packed streams (no code bytes); the tables' counts are read back from them.
  // Even channel counts only: the anchor tables' search (ExcludeSingleExtremes) reads a chunk's packed anchor
  // rows, which then start on bytes.
  std::array<uint8_t*, kMaxStreams> code_streams = streams;
  code_streams[0] = s0 + o.codes;
  const bool packed = kernels.codes_nibbles != nullptr && !scheme.spike_reserve && page.channels % 2 == 0 &&
                      NibbleStages(scheme, scheme.num_streams()) &&
                      kernels.codes_nibbles(page, meta, *tables, code_streams.data());
  CodeScratch codes(packed ? 0 : n);
  if (!packed) kernels.codes(page, meta, *tables, codes.data());
  if (meta.frame_spikes > 0 && !masked_copy) {
    if (packed) {
      CopyFrameSpikeNibbles(meta, scheme.num_streams(), code_streams.data());
    } else {
      CopyFrameSpikeCodes(meta, codes.data());
    }
  }

  std::memcpy(s0 + o.lo, meta.lo.data(), 4 * meta.lo.size());
  std::memcpy(s0 + o.hi, meta.hi.data(), 4 * meta.hi.size());
  kernels.pack_end_pairs(meta.q_low.data(), meta.q_high.data(), chunk_values, scheme.end_pair_bits, s0 + o.ends);
  if (scheme.spike_reserve) {
    std::memcpy(s0 + o.spike_value, meta.spike_value.data(), 4 * chunk_values);
    std::memcpy(s0 + o.spike_index, meta.spike_index.data(), chunk_values);
  }
  std::memcpy(s0 + o.frame_value, meta.frame_value.data(), 4 * meta.frame_value.size());
  std::memcpy(s0 + o.frame_token, meta.frame_token.data(), 2 * meta.frame_token.size());
  if (scheme.num_streams() > 1) {
    // (Multi-stream packed pages are lynx's 4 + 4: NibbleStages.)
    const std::vector<uint64_t> count =
        MagnitudeHistogram(packed ? nullptr : codes.data(), code_streams.data(), meta, tables->max_code);
    // With the exact-extremes rule each stage's table leaves out the values the rule decodes at the chunk end,
    // found from the code bytes or, on the packed path, from lynx's two nibble streams (NibbleStages).
    uint8_t* out = s0 + o.tables;
    int known = 0;
    std::vector<uint64_t> stage_count;
    for (int s = 0; s + 1 < scheme.num_streams(); ++s) {
      known += scheme.stage_bits[s];
      const uint64_t* table_count = count.data();
      if (options.exact_extremes) {
        stage_count.assign(count.begin(), count.end());
        ExcludeSingleExtremes(packed ? nullptr : codes.data(), code_streams.data(), bits, known, kernels, meta,
                              stage_count.data());
        table_count = stage_count.data();
      }
      const std::vector<float> table = ConditionalMeanTable(*tables, table_count, known);
      std::memcpy(out, table.data(), 4 * table.size());
      out += 4 * table.size();
    }
  }
  if (packed) return true;
  int shift = bits;
  for (int i = 0; i < scheme.num_streams(); ++i) {
    shift -= scheme.stage_bits[i];
    PackField(codes.data(), n, shift, scheme.stage_bits[i], code_streams[i]);
  }
  return true;
}

absl::Status DecodeLynx(const ContainerLayout& layout, const std::array<const uint8_t*, kMaxStreams>& streams,
                        int stages, const CodecOptions& options, const LynxKernels& kernels,
                        const MutablePageView& out) {
  const AnchorRule rule = options.anchor_rule;
  const Scheme& scheme = layout.scheme;
  const int bits = scheme.total_code_bits();
  const auto tables = GetLynxTables(layout.alpha, layout.top_width, bits);
  const int chunk_len = layout.tokens < layout.chunk_tokens ? layout.tokens : layout.chunk_tokens;
  MetaScratch scratch;
  LynxPageMeta& meta = scratch.meta();
  meta.Resize(layout.tokens, layout.channels, chunk_len, scheme.spike_reserve, scheme.end_pair_bits,
              PageFrameSpikes(scheme, layout.tokens, layout.chunk_tokens));
  const size_t chunk_values = meta.q_low.size();
  const MetaOffsets o = Offsets(scheme, layout.channels, chunk_values, meta.frame_token.size());
  const uint8_t* s0 = streams[0];
  std::memcpy(meta.lo.data(), s0 + o.lo, 4 * meta.lo.size());
  std::memcpy(meta.hi.data(), s0 + o.hi, 4 * meta.hi.size());
  for (int c = 0; c < layout.channels; ++c) {
    if (!std::isfinite(meta.lo[c]) || !std::isfinite(meta.hi[c]) || !(meta.lo[c] <= meta.hi[c])) {
      return absl::DataLossError(absl::StrCat("lynx container: bad channel range [", meta.lo[c], ", ", meta.hi[c],
                                              "] for channel ", c));
    }
  }
  // The fused pass fills what the unfused one and kernels.derive would (below); on false the unfused one runs and
  // names a bad index.
  const bool derived = kernels.decode_chunk_parameters != nullptr &&
                       kernels.decode_chunk_parameters(s0 + o.ends, meta);
  if (!derived) {
    uint32_t* pairs = scratch.pairs(chunk_values);
    kernels.unpack_end_pairs(s0 + o.ends, chunk_values, scheme.end_pair_bits, pairs);
    if (!kernels.end_pairs(pairs, chunk_values, meta.grid_max, meta.q_low.data(), meta.q_high.data())) {
      for (size_t i = 0; i < chunk_values; ++i) {
        if (pairs[i] > MaxEndPairIndex(meta.grid_max)) {
          return absl::DataLossError(absl::StrCat("lynx container: chunk end pair index ", pairs[i], " at chunk ",
                                                  i / layout.channels, ", channel ", i % layout.channels,
                                                  " is past the grid"));
        }
      }
      return absl::InternalError("lynx container: end pair inversion failed on valid indices");
    }
  }
  if (scheme.spike_reserve) {
    std::memcpy(meta.spike_value.data(), s0 + o.spike_value, 4 * chunk_values);
    std::memcpy(meta.spike_index.data(), s0 + o.spike_index, chunk_values);
    for (size_t i = 0; i < chunk_values; ++i) {
      if (!std::isfinite(meta.spike_value[i]) || meta.spike_index[i] >= chunk_len) {
        return absl::DataLossError(absl::StrCat("lynx container: bad spike (value ", meta.spike_value[i], ", index ",
                                                meta.spike_index[i], ") at chunk ", i / layout.channels,
                                                ", channel ", i % layout.channels));
      }
    }
  }
  std::memcpy(meta.frame_value.data(), s0 + o.frame_value, 4 * meta.frame_value.size());
  std::memcpy(meta.frame_token.data(), s0 + o.frame_token, 2 * meta.frame_token.size());
  if (absl::Status st = CheckFrameSpikes(meta); !st.ok()) return st;
  // The conditional-mean tables (every one checked, used or not): finite magnitudes in [0, 1].
  std::vector<float> stored(LynxAnchorTableFloats(scheme));
  if (!stored.empty()) std::memcpy(stored.data(), s0 + o.tables, 4 * stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    if (!(stored[i] >= 0.0f && stored[i] <= 1.0f)) {
      return absl::DataLossError(
          absl::StrCat("lynx container: anchor table entry ", i, " is ", stored[i], ", outside [0, 1]"));
    }
  }
  if (!derived) kernels.derive(meta);

  std::array<const uint8_t*, kMaxStreams> code_streams = streams;
  code_streams[0] = s0 + o.codes;
  int known = 0;
  size_t table_offset = 0;
  for (int i = 0; i < stages; ++i) {
    known += scheme.stage_bits[i];
    if (i + 1 < stages) table_offset += size_t{1} << (known - 1);
  }
  std::vector<float> signed_table;
  const float* table = tables->decode_table(known, rule).data();
  if (rule == AnchorRule::kConditionalMean && known < bits) {
    // Entries [0, 2^(known-1)) are the stored magnitudes, the upper half their negations (decode_table's form).
    const size_t cells = size_t{1} << (known - 1);
    signed_table.resize(2 * cells);
    for (size_t h = 0; h < cells; ++h) {
      signed_table[h] = stored[table_offset + h];
      signed_table[cells + h] = -stored[table_offset + h];
    }
    table = signed_table.data();
  }
  const bool extremes = options.exact_extremes && known < bits;
  const float top = tables->full_values[tables->max_code];
  // The fused kernel reads the streams itself and applies the exact-extremes rule as it writes each row.
  const bool fused = kernels.reconstruct_nibbles != nullptr && NibbleStages(scheme, stages) &&
                     kernels.reconstruct_nibbles(code_streams.data(), stages, meta, table, extremes ? &top : nullptr,
                                                 out);
  const size_t n = static_cast<size_t>(layout.tokens) * layout.channels;
  CodeScratch prefix(fused ? 0 : n);
  if (!fused) {
    for (int i = 0; i < stages; ++i) AppendField(code_streams[i], n, scheme.stage_bits[i], i == 0, prefix.data());
    kernels.reconstruct(prefix.data(), meta, table, known, out);
    if (extremes) ApplyExactExtremes(prefix.data(), known, top, kernels, meta, out);
  }
  if (scheme.spike_reserve) {
    for (int k = 0; k < meta.num_chunks; ++k) {
      for (int c = 0; c < layout.channels; ++c) {
        const size_t i = static_cast<size_t>(k) * layout.channels + c;
        out.at(k * chunk_len + meta.spike_index[i], c) = meta.spike_value[i];
      }
    }
  }
  ApplyFrameSpikes(meta, out);
  return absl::OkStatus();
}

}  // namespace kvt::codec::internal
