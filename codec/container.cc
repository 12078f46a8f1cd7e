#include "codec/container.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "codec/options.h"
#include "codec/page.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace kvt::codec {
namespace {

// Field offsets (docs/FORMAT.md).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffKind = 6;
constexpr size_t kOffNumStreams = 7;
constexpr size_t kOffStageBits = 8;
constexpr size_t kOffFlags = 16;
constexpr size_t kOffEndPairBits = 17;
constexpr size_t kOffChunkTokens = 18;
constexpr size_t kOffTokens = 20;
constexpr size_t kOffChannels = 24;
constexpr size_t kOffAlpha = 28;
constexpr size_t kOffStreamTable = 32;  // 8 x {u32 payload length, u32 payload CRC32C}
constexpr size_t kOffTopWidth = 96;
constexpr size_t kOffHeaderCrc = 100;
static_assert(kOffHeaderCrc + 4 == kContainerHeaderBytes);

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian host (x86-64, aarch64): the format's byte order
  return v;
}
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

size_t PackedBytes(size_t values, int bits) { return (values * static_cast<size_t>(bits) + 7) / 8; }

}  // namespace

size_t LynxAnchorTableFloats(const Scheme& scheme) {
  if (scheme.kind != SchemeKind::kLynx) return 0;
  size_t floats = 0;
  int known = 0;
  for (int s = 0; s + 1 < scheme.num_streams(); ++s) {
    known += scheme.stage_bits[s];
    floats += size_t{1} << (known - 1);
  }
  return floats;
}

int PageFrameSpikes(const Scheme& scheme, int tokens, int chunk_tokens) {
  if (scheme.kind != SchemeKind::kLynx || tokens <= 0 || chunk_tokens <= 0) return 0;
  const int chunk_len = tokens < chunk_tokens ? tokens : chunk_tokens;
  return scheme.frame_spikes < chunk_len - 1 ? scheme.frame_spikes : chunk_len - 1;
}

int NumChunks(int tokens, int chunk_tokens) {
  if (tokens <= 0 || chunk_tokens <= 0) return 0;
  return tokens < chunk_tokens ? 1 : tokens / chunk_tokens;
}

absl::Status ValidateScheme(const Scheme& s) {
  auto fixed = [&](int bits) -> absl::Status {
    if (s.stage_bits != std::vector<int>{bits} || s.spike_reserve || s.end_pair_bits != 0 || s.frame_spikes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheme ", s.Name(), ": a single ", bits, "-bit stream without spikes is required"));
    }
    return absl::OkStatus();
  };
  switch (s.kind) {
    case SchemeKind::kBf16:
      return fixed(16);
    case SchemeKind::kInt8:
      return fixed(8);
    case SchemeKind::kInt4:
      return fixed(4);
    case SchemeKind::kFp8:
      return fixed(8);
    case SchemeKind::kLynx: {
      if (s.num_streams() < 1 || s.num_streams() > kMaxStreams) {
        return absl::InvalidArgumentError(absl::StrCat("lynx scheme with ", s.num_streams(), " streams (1..8)"));
      }
      for (int b : s.stage_bits) {
        if (b < 1 || b > 8) return absl::InvalidArgumentError(absl::StrCat("lynx stage width ", b, " outside 1..8"));
      }
      int total = s.total_code_bits();
      if (total < 2 || total > 8) {
        return absl::InvalidArgumentError(absl::StrCat("lynx total code bits ", total, " outside 2..8"));
      }
      if (s.end_pair_bits < kMinEndPairBits || s.end_pair_bits > kMaxEndPairBits) {
        return absl::InvalidArgumentError(absl::StrCat("lynx end pair bits ", s.end_pair_bits, " outside ",
                                                       kMinEndPairBits, "..", kMaxEndPairBits));
      }
      if (s.frame_spikes < 0 || s.frame_spikes > kMaxFrameSpikes) {
        return absl::InvalidArgumentError(
            absl::StrCat("lynx frame spikes ", s.frame_spikes, " outside 0..", kMaxFrameSpikes));
      }
      if (s.spike_reserve && s.frame_spikes != 0) {
        return absl::InvalidArgumentError("lynx spike reserving takes no frame spikes");
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown scheme kind ", static_cast<int>(s.kind)));
}

absl::Status ValidatePageDims(int tokens, int channels, int chunk_tokens) {
  if (tokens < 1 || tokens > kMaxPageTokens) {
    return absl::InvalidArgumentError(absl::StrCat("page tokens ", tokens, " outside 1..", kMaxPageTokens));
  }
  if (channels < 1 || channels > kMaxPageChannels) {
    return absl::InvalidArgumentError(absl::StrCat("page channels ", channels, " outside 1..", kMaxPageChannels));
  }
  if (static_cast<size_t>(tokens) * static_cast<size_t>(channels) > kMaxPageValues) {
    return absl::InvalidArgumentError(
        absl::StrCat("page of ", tokens, " x ", channels, " values exceeds ", kMaxPageValues));
  }
  if (chunk_tokens < 1 || chunk_tokens > 256) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_tokens ", chunk_tokens, " outside 1..256"));
  }
  if (tokens >= chunk_tokens && tokens % chunk_tokens != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page tokens ", tokens, " is not a multiple of chunk_tokens ", chunk_tokens));
  }
  return absl::OkStatus();
}

size_t StreamPayloadBytes(const Scheme& scheme, int stream, int tokens, int channels, int chunk_tokens) {
  if (!ValidateScheme(scheme).ok() || !ValidatePageDims(tokens, channels, chunk_tokens).ok()) return 0;
  if (stream < 0 || stream >= scheme.num_streams()) return 0;
  const size_t n = static_cast<size_t>(tokens) * channels;
  const size_t chunk_values = static_cast<size_t>(NumChunks(tokens, chunk_tokens)) * channels;
  switch (scheme.kind) {
    case SchemeKind::kBf16:
      return 2 * n;
    case SchemeKind::kInt8:
    case SchemeKind::kInt4:
      // fp16 min + fp16 scale per (chunk, channel), then the packed codes.
      return 4 * chunk_values + PackedBytes(n, scheme.stage_bits[0]);
    case SchemeKind::kFp8: {
      const size_t groups = (static_cast<size_t>(channels) + 127) / 128;
      return 4 * static_cast<size_t>(tokens) * groups + n;
    }
    case SchemeKind::kLynx: {
      if (stream > 0) return PackedBytes(n, scheme.stage_bits[stream]);
      // f32 lo, hi per channel; the chunk end pairs; spikes; frame spikes (f32 value, u16 token); the tables.
      size_t meta = 8 * static_cast<size_t>(channels) + PackedBytes(chunk_values, scheme.end_pair_bits);
      if (scheme.spike_reserve) meta += 5 * chunk_values;
      meta += 6 * static_cast<size_t>(PageFrameSpikes(scheme, tokens, chunk_tokens)) * channels;
      meta += 4 * LynxAnchorTableFloats(scheme);
      return meta + PackedBytes(n, scheme.stage_bits[0]);
    }
  }
  return 0;
}

void ComputeLayout(ContainerLayout& layout) {
  layout.header_bytes = kContainerHeaderBytes;
  layout.flags = static_cast<uint8_t>((layout.scheme.spike_reserve ? kFlagSpikeReserve : 0) |
                                     (layout.scheme.frame_spikes << kFlagFrameSpikesShift));
  size_t offset = 0;
  layout.stream_offset.fill(0);
  layout.stream_length.fill(0);
  for (int i = 0; i < layout.scheme.num_streams(); ++i) {
    size_t len = StreamPayloadBytes(layout.scheme, i, layout.tokens, layout.channels, layout.chunk_tokens);
    if (i == 0) len += kContainerHeaderBytes;
    layout.stream_offset[i] = offset;
    layout.stream_length[i] = len;
    offset += len;
  }
  layout.total_bytes = offset;
}

void WriteContainerHeader(const ContainerLayout& layout, uint8_t* h) {
  std::memset(h, 0, kContainerHeaderBytes);
  Store<uint32_t>(h + kOffMagic, kContainerMagic);
  Store<uint16_t>(h + kOffVersion, kContainerVersion);
  h[kOffKind] = static_cast<uint8_t>(layout.scheme.kind);
  h[kOffNumStreams] = static_cast<uint8_t>(layout.scheme.num_streams());
  for (int i = 0; i < layout.scheme.num_streams(); ++i) h[kOffStageBits + i] = layout.scheme.stage_bits[i];
  h[kOffFlags] = layout.flags;
  h[kOffEndPairBits] = static_cast<uint8_t>(layout.scheme.end_pair_bits);
  Store<uint16_t>(h + kOffChunkTokens, static_cast<uint16_t>(layout.chunk_tokens));
  Store<uint32_t>(h + kOffTokens, static_cast<uint32_t>(layout.tokens));
  Store<uint32_t>(h + kOffChannels, static_cast<uint32_t>(layout.channels));
  Store<float>(h + kOffAlpha, layout.scheme.kind == SchemeKind::kLynx ? layout.alpha : 0.0f);
  Store<float>(h + kOffTopWidth, layout.scheme.kind == SchemeKind::kLynx ? layout.top_width : 0.0f);
  for (int i = 0; i < layout.scheme.num_streams(); ++i) {
    size_t payload = layout.stream_length[i] - (i == 0 ? kContainerHeaderBytes : 0);
    Store<uint32_t>(h + kOffStreamTable + 8 * i, static_cast<uint32_t>(payload));
    Store<uint32_t>(h + kOffStreamTable + 8 * i + 4, layout.stream_crc[i]);
  }
  Store<uint32_t>(h + kOffHeaderCrc, Crc32c(h, kOffHeaderCrc));
}

absl::StatusOr<ContainerLayout> ParseContainerHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kContainerHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("container truncated: ", bytes.size(), " bytes, the header needs ",
                                                   kContainerHeaderBytes));
  }
  const uint8_t* h = bytes.data();
  if (Load<uint32_t>(h + kOffMagic) != kContainerMagic) {
    return absl::InvalidArgumentError("not a kvt container: bad magic");
  }
  if (uint16_t v = Load<uint16_t>(h + kOffVersion); v != kContainerVersion) {
    return absl::InvalidArgumentError(absl::StrCat("container version ", v, " unsupported (this build reads only ",
                                                   kContainerVersion, "; versions 1 to 3 encode lynx differently: re-encode)"));
  }
  if (uint32_t crc = Crc32c(h, kOffHeaderCrc); crc != Load<uint32_t>(h + kOffHeaderCrc)) {
    return absl::DataLossError("container header CRC32C mismatch");
  }
  ContainerLayout layout;
  const uint8_t kind = h[kOffKind];
  if (kind < static_cast<uint8_t>(SchemeKind::kBf16) || kind > static_cast<uint8_t>(SchemeKind::kLynx)) {
    return absl::InvalidArgumentError(absl::StrCat("container scheme kind ", kind, " unknown"));
  }
  layout.scheme.kind = static_cast<SchemeKind>(kind);
  const int num_streams = h[kOffNumStreams];
  if (num_streams < 1 || num_streams > kMaxStreams) {
    return absl::InvalidArgumentError(absl::StrCat("container stream count ", num_streams, " outside 1..8"));
  }
  layout.scheme.stage_bits.clear();
  for (int i = 0; i < kMaxStreams; ++i) {
    if (i < num_streams) {
      layout.scheme.stage_bits.push_back(h[kOffStageBits + i]);
    } else if (h[kOffStageBits + i] != 0) {
      return absl::InvalidArgumentError(absl::StrCat("container stage_bits[", i, "] set past the stream count"));
    }
  }
  layout.flags = h[kOffFlags];
  if ((layout.flags & ~(kFlagSpikeReserve | kFlagFrameSpikesMask)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("container flags 0x", absl::Hex(layout.flags), " unknown"));
  }
  layout.scheme.spike_reserve = (layout.flags & kFlagSpikeReserve) != 0;
  layout.scheme.frame_spikes = (layout.flags & kFlagFrameSpikesMask) >> kFlagFrameSpikesShift;
  layout.scheme.end_pair_bits = h[kOffEndPairBits];
  // ValidateScheme names the field: flags or end pair bits set for a scheme without them, or out of range.
  KVT_RETURN_IF_ERROR(ValidateScheme(layout.scheme));
  layout.chunk_tokens = Load<uint16_t>(h + kOffChunkTokens);
  const uint32_t tokens = Load<uint32_t>(h + kOffTokens);
  const uint32_t channels = Load<uint32_t>(h + kOffChannels);
  if (tokens > static_cast<uint32_t>(kMaxPageTokens) || channels > static_cast<uint32_t>(kMaxPageChannels)) {
    return absl::InvalidArgumentError(absl::StrCat("container dims ", tokens, " x ", channels, " out of range"));
  }
  layout.tokens = static_cast<int>(tokens);
  layout.channels = static_cast<int>(channels);
  KVT_RETURN_IF_ERROR(ValidatePageDims(layout.tokens, layout.channels, layout.chunk_tokens));
  layout.alpha = Load<float>(h + kOffAlpha);
  if (layout.scheme.kind == SchemeKind::kLynx) {
    if (!std::isfinite(layout.alpha) || !(layout.alpha >= kMinAlpha) || !(layout.alpha <= kMaxAlpha)) {
      return absl::InvalidArgumentError(absl::StrCat("container alpha ", layout.alpha, " out of range"));
    }
  } else if (Load<uint32_t>(h + kOffAlpha) != 0) {
    return absl::InvalidArgumentError("container alpha set for a scheme without one");
  }
  layout.top_width = Load<float>(h + kOffTopWidth);
  if (layout.scheme.kind == SchemeKind::kLynx) {
    if (!ValidTopWidth(layout.top_width)) {
      return absl::InvalidArgumentError(absl::StrCat("container top_width ", layout.top_width, " out of range"));
    }
  } else if (Load<uint32_t>(h + kOffTopWidth) != 0) {
    return absl::InvalidArgumentError("container top_width set for a scheme without one");
  }
  ContainerLayout expected = layout;
  ComputeLayout(expected);
  for (int i = 0; i < kMaxStreams; ++i) {
    const uint32_t len = Load<uint32_t>(h + kOffStreamTable + 8 * i);
    const uint32_t crc = Load<uint32_t>(h + kOffStreamTable + 8 * i + 4);
    if (i >= num_streams) {
      if (len != 0 || crc != 0) {
        return absl::InvalidArgumentError(absl::StrCat("container stream table entry ", i, " set past the count"));
      }
      continue;
    }
    const size_t want = expected.stream_length[i] - (i == 0 ? kContainerHeaderBytes : 0);
    if (len != want) {
      return absl::InvalidArgumentError(absl::StrCat("container stream ", i, " length ", len, " but ", want,
                                                     " for a ", tokens, " x ", channels, " ",
                                                     layout.scheme.Name(), " page"));
    }
    expected.stream_crc[i] = crc;
  }
  return expected;
}

absl::Status CheckContainerStreams(const ContainerLayout& layout, absl::Span<const uint8_t> container, int stages) {
  if (container.size() > layout.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("container has ", container.size() - layout.total_bytes,
                                                   " bytes past its last stream"));
  }
  for (int i = 0; i < stages; ++i) {
    const size_t end = layout.stream_offset[i] + layout.stream_length[i];
    if (container.size() < end) {
      return absl::InvalidArgumentError(absl::StrCat("container truncated: stream ", i, " ends at byte ", end,
                                                     " but only ", container.size(), " bytes are present"));
    }
    const size_t skip = i == 0 ? layout.header_bytes : 0;
    if (Crc32c(container.data() + layout.stream_offset[i] + skip, layout.stream_length[i] - skip) !=
        layout.stream_crc[i]) {
      return absl::DataLossError(absl::StrCat("container stream ", i, " CRC32C mismatch"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::codec
