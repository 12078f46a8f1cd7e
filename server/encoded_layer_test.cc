#include "server/encoded_layer.h"

#include <cmath>
#include <memory>
#include <vector>

#include "codec/codec.h"
#include "codec/container.h"
#include "gtest/gtest.h"

namespace kvt::server {
namespace {

std::vector<codec::EncodedPage> Pages(const char* scheme, int n) {
  std::vector<codec::EncodedPage> pages;
  for (int p = 0; p < n; ++p) {
    std::vector<float> values(64 * 32);
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * i + p) * (1 + i % 5);
    const codec::PageView page{values.data(), 64, 32, 0};
    absl::StatusOr<codec::EncodedPage> enc = codec::EncodePage(*codec::ParseScheme(scheme), {}, page);
    EXPECT_TRUE(enc.ok()) << enc.status();
    pages.push_back(*std::move(enc));
  }
  return pages;
}

TEST(EncodedLayer, CpuPagesAreOwnedAndTheirStreamsAreTheContainersStreams) {
  const std::vector<codec::EncodedPage> expect = Pages("lynx-a2r2r4", 3);
  EncodedLayer layer(Pages("lynx-a2r2r4", 3));  // the layer's own copies: `expect` is only for comparison
  EncodedLayer moved = std::move(layer);
  ASSERT_EQ(moved.num_pages(), 3u);
  for (size_t p = 0; p < 3; ++p) {
    const absl::Span<const absl::Span<const uint8_t>> streams = moved.streams(p);
    ASSERT_EQ(streams.size(), 3u);
    for (int s = 0; s < 3; ++s) {
      const absl::Span<const uint8_t> want = expect[p].stream(s);
      EXPECT_EQ(std::vector<uint8_t>(streams[s].begin(), streams[s].end()),
                std::vector<uint8_t>(want.begin(), want.end()))
          << "page " << p << " stream " << s;
    }
    // Stream 0 begins with the container header, and the streams follow one another.
    EXPECT_EQ(streams[1].data(), streams[0].data() + streams[0].size());
    EXPECT_TRUE(codec::ParseContainerHeader(streams[0]).ok());
  }
}

TEST(EncodedLayer, TheOwnerLivesAsLongAsTheLayer) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(100, 0x5A);
  std::weak_ptr<std::vector<uint8_t>> watch = bytes;
  std::vector<std::vector<absl::Span<const uint8_t>>> streams = {
      {absl::MakeConstSpan(*bytes).subspan(0, 60), absl::MakeConstSpan(*bytes).subspan(60)}};
  auto layer = std::make_unique<EncodedLayer>(std::move(streams), std::move(bytes));
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(layer->streams(0)[1].size(), 40u);
  EXPECT_EQ(layer->streams(0)[1][39], 0x5A);
  layer.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(EncodedLayer, AnEmptyLayerHasNoPages) {
  EXPECT_EQ(EncodedLayer().num_pages(), 0u);
  EXPECT_EQ(EncodedLayer(std::vector<codec::EncodedPage>{}).num_pages(), 0u);
}

}  // namespace
}  // namespace kvt::server
