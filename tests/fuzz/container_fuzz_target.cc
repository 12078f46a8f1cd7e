// libFuzzer target for untrusted containers: header parsing and decoding at every stage count must return a
// Status, never crash or touch memory outside the input and the output page.
// Input: one mode byte, then container bytes. Mode bit 0 set = "resealed": the target rewrites the header CRC
// and every stream CRC before decoding, as a malicious sender would, so the fuzzer gets past the checksums and
// into the metadata and payload checks. Corpus seeds: make_fuzz_corpus.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/codec.h"
#include "codec/container.h"
#include "common/crc32c.h"

namespace {

using kvt::codec::ContainerLayout;

// Fixes the checksums of `bytes` in place; returns false if the header does not parse even then.
bool Reseal(std::vector<uint8_t>& bytes) {
  constexpr size_t kHeaderCrcOffset = kvt::codec::kContainerHeaderBytes - 4;
  if (bytes.size() < kvt::codec::kContainerHeaderBytes) return false;
  const uint32_t header_crc = kvt::Crc32c(bytes.data(), kHeaderCrcOffset);
  for (int i = 0; i < 4; ++i) bytes[kHeaderCrcOffset + i] = static_cast<uint8_t>(header_crc >> (8 * i));
  absl::StatusOr<ContainerLayout> layout = kvt::codec::ParseContainerHeader(bytes);
  if (!layout.ok()) return false;
  for (int i = 0; i < layout->scheme.num_streams(); ++i) {
    const size_t skip = i == 0 ? layout->header_bytes : 0;
    const size_t end = layout->stream_offset[i] + layout->stream_length[i];
    if (end > bytes.size()) break;
    layout->stream_crc[i] =
        kvt::Crc32c(bytes.data() + layout->stream_offset[i] + skip, layout->stream_length[i] - skip);
  }
  kvt::codec::WriteContainerHeader(*layout, bytes.data());
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool reseal = (data[0] & 1) != 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (reseal && !Reseal(bytes)) return 0;
  absl::StatusOr<ContainerLayout> layout = kvt::codec::ParseContainerHeader(bytes);
  if (!layout.ok()) return 0;
  // Keep each run small: the header bounds tokens * channels by kMaxPageValues, far too much per input.
  if (static_cast<size_t>(layout->tokens) * layout->channels > (size_t{1} << 20)) return 0;
  std::vector<float> out(static_cast<size_t>(layout->tokens) * layout->channels);
  kvt::codec::MutablePageView view{out.data(), layout->tokens, layout->channels, 0};
  for (int stages = 0; stages <= layout->scheme.num_streams() + 1; ++stages) {
    (void)kvt::codec::DecodePage(bytes, stages, view);
  }
  return 0;
}
