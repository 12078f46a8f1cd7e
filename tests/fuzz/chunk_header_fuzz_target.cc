// libFuzzer target for the data plane's chunk header (transport/chunk_header.h), the first bytes a daemon reads
// from a peer: parsing arbitrary bytes must return a Status and never read past them, and whatever parses must
// survive an encode/decode round trip unchanged (a mismatch traps, so libFuzzer reports it).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/chunk_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvt::transport::ChunkHeader;
  absl::StatusOr<ChunkHeader> header = kvt::transport::DecodeChunkHeader(absl::Span<const uint8_t>(data, size));
  if (!header.ok()) return 0;
  std::vector<uint8_t> again(kvt::transport::kChunkHeaderBytes);
  kvt::transport::EncodeChunkHeader(*header, absl::MakeSpan(again));
  absl::StatusOr<ChunkHeader> reparsed = kvt::transport::DecodeChunkHeader(again);
  if (!reparsed.ok() || !(*reparsed == *header)) __builtin_trap();
  return 0;
}
