// The fuzz target for untrusted containers: header parsing and decoding at every stage count must return a
// Status (never crash, never touch memory outside the input and the output page). Built two ways:
// with libFuzzer (--config=fuzz, container_fuzzer) and into a plain test that replays mutated seeds on CI.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/codec.h"
#include "codec/container.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvt::codec;
  absl::Span<const uint8_t> bytes(data, size);
  absl::StatusOr<ContainerLayout> layout = ParseContainerHeader(bytes);
  if (!layout.ok()) return 0;
  // Header checks bound tokens * channels, so this allocation is bounded by kMaxPageValues.
  if (static_cast<size_t>(layout->tokens) * layout->channels > (size_t{1} << 20)) return 0;
  std::vector<float> out(static_cast<size_t>(layout->tokens) * layout->channels);
  MutablePageView view{out.data(), layout->tokens, layout->channels, 0};
  for (int stages = 0; stages <= layout->scheme.num_streams() + 1; ++stages) {
    (void)DecodePage(bytes, stages, view);
  }
  return 0;
}
