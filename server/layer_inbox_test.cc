// LayerInbox: the layer's containers back to back in plan order, every stream's destination at its place in its
// container, nothing overlapping, and the buffer back to the pool when the last holder lets go.
#include "server/layer_inbox.h"

#include <set>

#include "codec/scheme.h"
#include "gtest/gtest.h"

namespace kvt::server {
namespace {

kv::PlannedPage Page(uint32_t kind, uint32_t first, uint32_t tokens, std::vector<uint64_t> streams) {
  kv::PlannedPage p;
  p.spec = kv::PageSpec{0, kind, first, tokens};
  p.stream_bytes = std::move(streams);
  return p;
}

TEST(LayerInbox, StreamsLieInTheirContainersBackToBackInPlanOrder) {
  auto pool = HostBufferPool::Create({});
  const std::vector<kv::PlannedPage> pages = {Page(0, 0, 256, {1000, 700}), Page(0, 256, 256, {1000, 700}),
                                          Page(1, 0, 256, {1000, 700}), Page(1, 256, 64, {300, 200})};
  absl::StatusOr<std::shared_ptr<LayerInbox>> inbox = LayerInbox::Create(pages, *pool, HostMemory::kPageable);
  ASSERT_TRUE(inbox.ok()) << inbox.status();
  EXPECT_EQ((*inbox)->num_pages(), 4u);
  EXPECT_EQ((*inbox)->bytes(), 3 * 1700u + 500u);
  const std::vector<transport::StreamBounds> bounds = (*inbox)->Bounds();
  ASSERT_EQ(bounds.size(), 8u);
  std::set<std::pair<uint32_t, uint8_t>> seen;
  const uint8_t* next = (*inbox)->container(0).data();
  for (const transport::StreamBounds& b : bounds) {
    EXPECT_TRUE(seen.insert({b.page, b.stage}).second);
    EXPECT_EQ(b.length, pages[b.page].stream_bytes[b.stage]);
    EXPECT_EQ(b.destination, next) << "page " << b.page << " stage " << int{b.stage};
    next += b.length;
    const absl::Span<const uint8_t> c = (*inbox)->container(b.page);
    EXPECT_GE(b.destination, c.data());
    EXPECT_LE(b.destination + b.length, c.data() + c.size());
  }
  EXPECT_EQ((*inbox)->container(3).size(), 500u);
  EXPECT_EQ(pool->stats().leased_bytes > 0, true);
  inbox->reset();
  EXPECT_EQ(pool->stats().leased_bytes, 0u);
}

TEST(LayerInbox, AnEmptyLayerIsRefused) {
  auto pool = HostBufferPool::Create({});
  EXPECT_EQ(LayerInbox::Create({}, *pool, HostMemory::kPinned).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::server
