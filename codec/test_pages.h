// Pages for codec tests and benchmarks: realistic synthetic KV (Laplacian bulk, a few outlier channels, sink
// tokens) and the adversarial pages every implementation must survive. Deterministic for a seed.
#ifndef KVT_CODEC_TEST_PAGES_H_
#define KVT_CODEC_TEST_PAGES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "codec/page.h"

namespace kvt::codec {

struct TestPage {
  std::string name;
  int tokens = 0;
  int channels = 0;
  std::vector<float> data;  // dense, token-major

  PageView view() const { return PageView{data.data(), tokens, channels, 0}; }
};

// Laplacian(0, 1) bulk, ~1/64 of the channels scaled 20..80x (outlier channels), token 0 a high-norm sink.
TestPage RealisticPage(int tokens, int channels, uint64_t seed);

// Constant channels, all-zero chunks, +-0, denormals, offsets that underflow to -0, 1e4 outliers, +-3e38,
// +-FLT_MAX, single-token pages, odd channel counts, pages shorter than a chunk, tiny ranges around a large offset.
std::vector<TestPage> AdversarialPages();

}  // namespace kvt::codec

#endif  // KVT_CODEC_TEST_PAGES_H_
