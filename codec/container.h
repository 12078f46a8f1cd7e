// The stream container (byte layout in docs/FORMAT.md, a contract between kvt versions):
// a fixed little-endian header, a stream table, then each stream as one contiguous byte range. Stream 0
// (the anchor) carries the header, the metadata and the anchor codes, so it decodes on its own.
// Parsing is for untrusted bytes: every field is checked before anything is read through it.
#ifndef KVT_CODEC_CONTAINER_H_
#define KVT_CODEC_CONTAINER_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/scheme.h"

namespace kvt::codec {

inline constexpr uint32_t kContainerMagic = 0x3154564Bu;  // "KVT1" in little-endian byte order
// Version 2: lynx chunk metadata as 12-bit interval ends and the conditional-mean anchor tables (docs/FORMAT.md).
// Version 3: the lynx curve's knee (top_width) in the header.
// Version 4: the lynx chunk-end pair width (header byte 17) and frame spikes (flags bits 1..3) in the header,
// the frame spikes' values and tokens in stream 0. Other versions are rejected with INVALID_ARGUMENT.
inline constexpr uint16_t kContainerVersion = 4;
// The fixed header that opens every container (and stream 0); docs/FORMAT.md has its fields.
inline constexpr size_t kContainerHeaderBytes = 104;
// ContainerLayout::flags bits.
inline constexpr uint8_t kFlagSpikeReserve = 0x01;
// Bits 1..3: the lynx scheme's frame spikes per page-channel (Scheme::frame_spikes, 0..7).
inline constexpr int kFlagFrameSpikesShift = 1;
inline constexpr uint8_t kFlagFrameSpikesMask = 0x0E;

// What a container says about itself, validated.
struct ContainerLayout {
  Scheme scheme;
  int tokens = 0;
  int channels = 0;
  int chunk_tokens = 0;
  float alpha = 0;
  float top_width = 0;   // lynx: the curve's knee (CodecOptions::top_width); 0 for other schemes
  uint8_t flags = 0;     // see docs/FORMAT.md
  size_t header_bytes = 0;
  std::array<size_t, kMaxStreams> stream_offset{};  // from the start of the container
  std::array<size_t, kMaxStreams> stream_length{};  // stream 0's length includes the header
  std::array<uint32_t, kMaxStreams> stream_crc{};   // CRC32C of each stream's payload (stream 0: after header)
  size_t total_bytes = 0;
};

// Reads and validates the header and stream table from the first bytes of a container (`bytes` may hold only
// a prefix, e.g. stream 0 alone). INVALID_ARGUMENT naming the bad field: bad magic, unknown version or scheme,
// dims out of range or disagreeing with the scheme's sizes, lengths that overflow, a truncated header.
// DATA_LOSS if the header's own CRC fails.
absl::StatusOr<ContainerLayout> ParseContainerHeader(absl::Span<const uint8_t> bytes);

// Checks that `container` (whose header parsed as `layout`) holds streams [0, stages) whole and intact: no bytes
// past its last stream, none of them truncated (INVALID_ARGUMENT), their CRC32Cs right (DATA_LOSS). What every
// decode path checks before it reads a stream.
absl::Status CheckContainerStreams(const ContainerLayout& layout, absl::Span<const uint8_t> container, int stages);

// The exact size of stream `i` for a page of these dims, the same formula the encoder and the header check use.
// Returns 0 if the dims are invalid for the scheme. Stream 0's size here excludes the header.
size_t StreamPayloadBytes(const Scheme& scheme, int stream, int tokens, int channels, int chunk_tokens);

// The f32 entries of a lynx scheme's conditional-mean anchor tables in stream 0: for every partial stage s
// (1..num_streams - 1, knowing the code's top k_s = stage_bits[0] + ... + stage_bits[s - 1] bits), 2^(k_s - 1)
// magnitudes. 0 for other schemes and single-stream lynx.
size_t LynxAnchorTableFloats(const Scheme& scheme);

// The frame spikes each channel of a tokens-token page keeps: the scheme's frame_spikes, but at most one fewer
// than the page's chunk length (so every chunk keeps a value of its own); 0 for non-lynx schemes.
int PageFrameSpikes(const Scheme& scheme, int tokens, int chunk_tokens);

// Chunks per channel in a page: tokens / chunk_tokens, or 1 for a page shorter than one chunk.
int NumChunks(int tokens, int chunk_tokens);

// OK if `scheme` is well formed (the widths its kind allows), else INVALID_ARGUMENT saying why.
absl::Status ValidateScheme(const Scheme& scheme);

// OK if (tokens, channels, chunk_tokens) is a page this codec handles (page.h limits; tokens a multiple of
// chunk_tokens or fewer than it), else INVALID_ARGUMENT naming the bad dim.
absl::Status ValidatePageDims(int tokens, int channels, int chunk_tokens);

// Fills the layout's derived fields (header_bytes, offsets, lengths, total) from scheme and dims, which must be
// valid. The encoder's way to build a layout; CRCs are left as they are.
void ComputeLayout(ContainerLayout& layout);

// Writes the header for `layout` (CRCs included) into header[0, kContainerHeaderBytes).
void WriteContainerHeader(const ContainerLayout& layout, uint8_t* header);

}  // namespace kvt::codec

#endif  // KVT_CODEC_CONTAINER_H_
