// The data-plane chunk header: what every stream chunk carries on the wire, ahead of its payload.
// A chunk is an opaque byte range [offset, offset + length) of one stream, named by (transfer id, page, stage);
// stage 0 is the anchor stream, stages >= 1 are residual streams. The payload CRC32C covers the payload bytes;
// the header CRC32C covers the header's first 36 bytes, so a header damaged in flight is rejected before use.
//
// Wire layout (kChunkHeaderBytes = 40, little-endian):
//   0 u32 magic "KVTC"   4 u8 version (1)   5 u8 stage   6 u16 flags (0)
//   8 u64 transfer_id   16 u32 page   20 u32 length   24 u64 offset   32 u32 payload_crc32c   36 u32 header_crc32c
// Pure functions, thread-safe.
#ifndef KVT_TRANSPORT_CHUNK_HEADER_H_
#define KVT_TRANSPORT_CHUNK_HEADER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvt::transport {

inline constexpr size_t kChunkHeaderBytes = 40;
inline constexpr uint32_t kChunkMagic = 0x4354564Bu;  // "KVTC" read as little-endian bytes.
inline constexpr uint8_t kChunkVersion = 1;
// Stages are 0 (anchor) .. kMaxStages - 1.
inline constexpr int kMaxStages = 8;

struct ChunkHeader {
  uint64_t transfer_id = 0;
  uint32_t page = 0;
  uint8_t stage = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint32_t payload_crc32c = 0;

  bool operator==(const ChunkHeader& o) const {
    return transfer_id == o.transfer_id && page == o.page && stage == o.stage && offset == o.offset &&
           length == o.length && payload_crc32c == o.payload_crc32c;
  }
};

// Writes `header` into out[0, kChunkHeaderBytes). `out` must hold at least kChunkHeaderBytes.
void EncodeChunkHeader(const ChunkHeader& header, absl::Span<uint8_t> out);

// Parses an untrusted header. Errors: INVALID_ARGUMENT (wrong size, bad magic or version, stage out of range,
// nonzero flags, offset + length overflows), DATA_LOSS (header CRC mismatch). Never reads past `bytes`.
absl::StatusOr<ChunkHeader> DecodeChunkHeader(absl::Span<const uint8_t> bytes);

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_CHUNK_HEADER_H_
