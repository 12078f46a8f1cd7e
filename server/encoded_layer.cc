#include "server/encoded_layer.h"

#include <utility>

namespace kvt::server {

EncodedLayer::EncodedLayer(std::vector<codec::EncodedPage> pages) {
  auto owned = std::make_shared<const std::vector<codec::EncodedPage>>(std::move(pages));
  streams_.reserve(owned->size());
  for (const codec::EncodedPage& page : *owned) {
    std::vector<absl::Span<const uint8_t>>& streams = streams_.emplace_back();
    for (int s = 0; s < page.layout.scheme.num_streams(); ++s) streams.push_back(page.stream(s));
  }
  owner_ = std::move(owned);
}

}  // namespace kvt::server
