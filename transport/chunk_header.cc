#include "transport/chunk_header.h"

#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"

namespace kvt::transport {
namespace {

constexpr size_t kHeaderCrcOffset = 36;

template <typename T>
void Put(uint8_t* p, T v) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian");
  std::memcpy(p, &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

void EncodeChunkHeader(const ChunkHeader& h, absl::Span<uint8_t> out) {
  uint8_t* p = out.data();
  Put<uint32_t>(p + 0, kChunkMagic);
  Put<uint8_t>(p + 4, kChunkVersion);
  Put<uint8_t>(p + 5, h.stage);
  Put<uint16_t>(p + 6, 0);
  Put<uint64_t>(p + 8, h.transfer_id);
  Put<uint32_t>(p + 16, h.page);
  Put<uint32_t>(p + 20, h.length);
  Put<uint64_t>(p + 24, h.offset);
  Put<uint32_t>(p + 32, h.payload_crc32c);
  Put<uint32_t>(p + kHeaderCrcOffset, Crc32c(p, kHeaderCrcOffset));
}

absl::StatusOr<ChunkHeader> DecodeChunkHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() != kChunkHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chunk header is %d bytes, expected %d", bytes.size(), kChunkHeaderBytes));
  }
  const uint8_t* p = bytes.data();
  if (Get<uint32_t>(p + kHeaderCrcOffset) != Crc32c(p, kHeaderCrcOffset)) {
    return absl::DataLossError("chunk header CRC32C mismatch");
  }
  if (Get<uint32_t>(p) != kChunkMagic) return absl::InvalidArgumentError("chunk header has a bad magic");
  if (p[4] != kChunkVersion) {
    return absl::InvalidArgumentError(absl::StrFormat("chunk header version %d is not supported", p[4]));
  }
  if (Get<uint16_t>(p + 6) != 0) return absl::InvalidArgumentError("chunk header has unknown flags");
  ChunkHeader h;
  h.stage = p[5];
  h.transfer_id = Get<uint64_t>(p + 8);
  h.page = Get<uint32_t>(p + 16);
  h.length = Get<uint32_t>(p + 20);
  h.offset = Get<uint64_t>(p + 24);
  h.payload_crc32c = Get<uint32_t>(p + 32);
  if (h.stage >= kMaxStages) {
    return absl::InvalidArgumentError(absl::StrFormat("chunk stage %d is out of range", h.stage));
  }
  if (h.offset > std::numeric_limits<uint64_t>::max() - h.length) {
    return absl::InvalidArgumentError("chunk offset + length overflows");
  }
  return h;
}

}  // namespace kvt::transport
