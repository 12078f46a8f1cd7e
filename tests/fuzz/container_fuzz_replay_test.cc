// Replays the container fuzz target on CI (no clang/libFuzzer needed): valid containers of every scheme,
// then many seeded mutations of them (bit flips, truncations, extensions, field overwrites). Under
// --config=asan this catches out-of-bounds access; in every build it checks that mutations of the checked
// fields are rejected with the right canonical code rather than decoded into garbage.
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "codec/codec.h"
#include "codec/scheme.h"
#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kvt::codec {
namespace {

std::vector<float> Page(int tokens, int channels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(tokens) * channels);
  for (auto& x : v) x = normal(rng);
  v[3] = 40.0f;  // an outlier
  return v;
}

std::vector<uint8_t> Encode(const std::string& scheme_name, int tokens, int channels) {
  absl::StatusOr<Scheme> scheme = ParseScheme(scheme_name);
  EXPECT_TRUE(scheme.ok()) << scheme.status();
  std::vector<float> page = Page(tokens, channels, 11);
  absl::StatusOr<EncodedPage> enc = EncodePage(*scheme, CodecOptions{}, PageView{page.data(), tokens, channels, 0});
  EXPECT_TRUE(enc.ok()) << enc.status();
  return enc.ok() ? enc->bytes : std::vector<uint8_t>{};
}

class ContainerFuzzReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(ContainerFuzzReplay, MutatedContainersNeverCrashTheDecoder) {
  const std::vector<uint8_t> seed = Encode(GetParam(), 64, 24);
  ASSERT_FALSE(seed.empty());
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> m = seed;
    const int kind = iter % 4;
    if (kind == 0) {  // flip a few bits
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) m[rng() % m.size()] ^= uint8_t(1u << (rng() % 8));
    } else if (kind == 1) {  // truncate
      m.resize(rng() % m.size());
    } else if (kind == 2) {  // extend with junk
      for (int k = 0; k < 1 + static_cast<int>(rng() % 64); ++k) m.push_back(static_cast<uint8_t>(rng()));
    } else {  // overwrite a header word with an extreme value
      const size_t at = rng() % std::min<size_t>(m.size(), 96);
      const uint8_t fill = (rng() & 1) ? 0xFF : 0x00;
      for (size_t k = at; k < std::min(m.size(), at + 4); ++k) m[k] = fill;
    }
    LLVMFuzzerTestOneInput(m.data(), m.size());
  }
}

TEST_P(ContainerFuzzReplay, EveryFlippedByteInTheAnchorStreamIsDetected) {
  const std::vector<uint8_t> seed = Encode(GetParam(), 64, 24);
  ASSERT_FALSE(seed.empty());
  absl::StatusOr<ContainerLayout> layout = ParseContainerHeader(seed);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<float> out(64 * 24);
  MutablePageView view{out.data(), 64, 24, 0};
  for (size_t i = 0; i < layout->stream_length[0]; ++i) {
    std::vector<uint8_t> m = seed;
    m[layout->stream_offset[0] + i] ^= 0x01;
    absl::Status s = DecodePage(m, 1, view);
    ASSERT_FALSE(s.ok()) << "flip at byte " << i << " of stream 0 was decoded";
    EXPECT_TRUE(s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kInvalidArgument)
        << s;
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, ContainerFuzzReplay, ::testing::ValuesIn(StandardSchemeNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) if (c == '-' || c == '+') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kvt::codec
