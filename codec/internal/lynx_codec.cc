#include "codec/internal/lynx_codec.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/internal/bitpack.h"
#include "codec/internal/lynx_math.h"

namespace kvt::codec::internal {
namespace {

// Per-thread scratch for the page's code bytes, so a hot encode/decode loop does not page-fault a fresh
// buffer per call. Large buffers are released after use.
class CodeScratch {
 public:
  explicit CodeScratch(size_t n) : buf_(Buffer()) { buf_.resize(n); }
  ~CodeScratch() {
    if (buf_.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(buf_);
  }
  uint8_t* data() { return buf_.data(); }

 private:
  static std::vector<uint8_t>& Buffer() {
    thread_local std::vector<uint8_t> buffer;
    return buffer;
  }
  std::vector<uint8_t>& buf_;
};

struct MetaOffsets {
  size_t lo, hi, q_mu, q_sigma, spike_value, spike_index, codes;
};

MetaOffsets Offsets(int channels, size_t chunk_values, bool spikes) {
  MetaOffsets o;
  o.lo = 0;
  o.hi = o.lo + 4 * static_cast<size_t>(channels);
  o.q_mu = o.hi + 4 * static_cast<size_t>(channels);
  o.q_sigma = o.q_mu + chunk_values;
  o.spike_value = o.q_sigma + chunk_values;
  o.spike_index = o.spike_value + (spikes ? 4 * chunk_values : 0);
  o.codes = o.spike_index + (spikes ? chunk_values : 0);
  return o;
}

}  // namespace

void EncodeLynx(const Scheme& scheme, const CodecOptions& options, const PageView& page, const LynxKernels& kernels,
                const std::array<uint8_t*, kMaxStreams>& streams) {
  const int bits = scheme.total_code_bits();
  const auto tables = GetLynxTables(options.alpha, bits);
  const int chunk_len = page.tokens < options.chunk_tokens ? page.tokens : options.chunk_tokens;
  LynxPageMeta meta;
  meta.Resize(page.tokens, page.channels, chunk_len, scheme.spike_reserve);
  if (scheme.spike_reserve) {
    SpikeStats(page, options.centering, meta);
  } else {
    kernels.stats(page, options.centering, meta);
  }
  kernels.derive(meta);

  const size_t n = page.num_values();
  CodeScratch codes(n);
  kernels.codes(page, meta, *tables, codes.data());

  const size_t chunk_values = meta.q_mu.size();
  const MetaOffsets o = Offsets(page.channels, chunk_values, scheme.spike_reserve);
  uint8_t* s0 = streams[0];
  std::memcpy(s0 + o.lo, meta.lo.data(), 4 * meta.lo.size());
  std::memcpy(s0 + o.hi, meta.hi.data(), 4 * meta.hi.size());
  std::memcpy(s0 + o.q_mu, meta.q_mu.data(), chunk_values);
  std::memcpy(s0 + o.q_sigma, meta.q_sigma.data(), chunk_values);
  if (scheme.spike_reserve) {
    std::memcpy(s0 + o.spike_value, meta.spike_value.data(), 4 * chunk_values);
    std::memcpy(s0 + o.spike_index, meta.spike_index.data(), chunk_values);
  }
  int shift = bits;
  for (int i = 0; i < scheme.num_streams(); ++i) {
    shift -= scheme.stage_bits[i];
    PackField(codes.data(), n, shift, scheme.stage_bits[i], i == 0 ? s0 + o.codes : streams[i]);
  }
}

absl::Status DecodeLynx(const ContainerLayout& layout, const std::array<const uint8_t*, kMaxStreams>& streams,
                        int stages, AnchorRule rule, const LynxKernels& kernels, const MutablePageView& out) {
  const Scheme& scheme = layout.scheme;
  const int bits = scheme.total_code_bits();
  const auto tables = GetLynxTables(layout.alpha, bits);
  const int chunk_len = layout.tokens < layout.chunk_tokens ? layout.tokens : layout.chunk_tokens;
  LynxPageMeta meta;
  meta.Resize(layout.tokens, layout.channels, chunk_len, scheme.spike_reserve);
  const size_t chunk_values = meta.q_mu.size();
  const MetaOffsets o = Offsets(layout.channels, chunk_values, scheme.spike_reserve);
  const uint8_t* s0 = streams[0];
  std::memcpy(meta.lo.data(), s0 + o.lo, 4 * meta.lo.size());
  std::memcpy(meta.hi.data(), s0 + o.hi, 4 * meta.hi.size());
  for (int c = 0; c < layout.channels; ++c) {
    if (!std::isfinite(meta.lo[c]) || !std::isfinite(meta.hi[c]) || !(meta.lo[c] <= meta.hi[c])) {
      return absl::DataLossError(absl::StrCat("lynx container: bad channel range [", meta.lo[c], ", ", meta.hi[c],
                                              "] for channel ", c));
    }
  }
  std::memcpy(meta.q_mu.data(), s0 + o.q_mu, chunk_values);
  std::memcpy(meta.q_sigma.data(), s0 + o.q_sigma, chunk_values);
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
  kernels.derive(meta);

  const size_t n = static_cast<size_t>(layout.tokens) * layout.channels;
  CodeScratch prefix(n);
  int known = 0;
  for (int i = 0; i < stages; ++i) {
    AppendField(i == 0 ? s0 + o.codes : streams[i], n, scheme.stage_bits[i], i == 0, prefix.data());
    known += scheme.stage_bits[i];
  }
  kernels.reconstruct(prefix.data(), meta, tables->decode_table(known, rule).data(), known, out);
  if (scheme.spike_reserve) {
    for (int k = 0; k < meta.num_chunks; ++k) {
      for (int c = 0; c < layout.channels; ++c) {
        const size_t i = static_cast<size_t>(k) * layout.channels + c;
        out.at(k * chunk_len + meta.spike_index[i], c) = meta.spike_value[i];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::codec::internal
