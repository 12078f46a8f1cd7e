// Writes the container fuzzer's seed corpus: one valid container per standard scheme and page shape, each in
// both modes (plain and resealed; see container_fuzz_target.cc).
//   make_fuzz_corpus DIR
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec/scheme.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  using namespace kvt::codec;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int written = 0;
  for (const std::string& name : StandardSchemeNames()) {
    for (std::string scheme_name : {name, name + "+spike"}) {
      absl::StatusOr<Scheme> scheme = ParseScheme(scheme_name);
      if (!scheme.ok()) continue;  // +spike exists only for the lynx family
      for (auto [tokens, channels] : {std::pair{1, 3}, std::pair{32, 8}, std::pair{64, 17}}) {
        std::vector<float> page(static_cast<size_t>(tokens) * channels);
        for (float& x : page) x = normal(rng);
        page[0] = 50.0f;
        absl::StatusOr<EncodedPage> enc =
            EncodePage(*scheme, CodecOptions{}, PageView{page.data(), tokens, channels, 0});
        if (!enc.ok()) {
          std::fprintf(stderr, "%s %dx%d: %s\n", scheme_name.c_str(), tokens, channels,
                       std::string(enc.status().message()).c_str());
          return 1;
        }
        for (uint8_t mode : {0, 1}) {
          const std::string path = std::string(argv[1]) + "/" + scheme_name + "_" + std::to_string(tokens) + "x" +
                                   std::to_string(channels) + "_m" + std::to_string(mode);
          std::ofstream f(path, std::ios::binary);
          f.put(static_cast<char>(mode));
          f.write(reinterpret_cast<const char*>(enc->bytes.data()), static_cast<std::streamsize>(enc->bytes.size()));
          if (!f) {
            std::fprintf(stderr, "cannot write %s\n", path.c_str());
            return 1;
          }
          ++written;
        }
      }
    }
  }
  std::printf("wrote %d seeds to %s\n", written, argv[1]);
  return 0;
}
