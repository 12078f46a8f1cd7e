// The stream container (DESIGN.md 4.4; byte layout in docs/FORMAT.md, a contract between kvt versions):
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
inline constexpr uint16_t kContainerVersion = 1;

// What a container says about itself, validated.
struct ContainerLayout {
  Scheme scheme;
  int tokens = 0;
  int channels = 0;
  int chunk_tokens = 0;
  float alpha = 0;
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

// The exact size of stream `i` for a page of these dims, the same formula the encoder and the header check use.
// Returns 0 if the dims are invalid for the scheme.
size_t StreamPayloadBytes(const Scheme& scheme, int stream, int tokens, int channels, int chunk_tokens);

}  // namespace kvt::codec

#endif  // KVT_CODEC_CONTAINER_H_
