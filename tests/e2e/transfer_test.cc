// Two daemons in one process, talking gRPC and UCX (tcp on loopback) as two hosts would: a prefill client offers
// a request's KV from shared memory, a decode client expects it into its own blocks.
#include <algorithm>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/kvt/v1/peer.grpc.pb.h"
#include "server/daemon.h"
#include "tests/e2e/daemon_pair.h"

namespace kvt::e2e {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kLayers = 4;
constexpr uint32_t kBlocks = 40;
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kHeads = 4;
constexpr uint32_t kHeadDim = 64;

class TransferTest : public ::testing::Test {
 protected:
  void SetUp() override { StartDaemons(/*rate_bytes_per_second=*/0); }

  void StartDaemons(double rate_bytes_per_second) {
    decode_client_.reset();
    prefill_client_.reset();
    decode_.reset();
    prefill_.reset();
    absl::StatusOr<DaemonPair> pair = StartDaemonPair(rate_bytes_per_second);
    ASSERT_TRUE(pair.ok()) << pair.status();
    prefill_ = std::move(pair->prefill);
    decode_ = std::move(pair->decode);
    prefill_client_ = std::move(pair->prefill_client);
    decode_client_ = std::move(pair->decode_client);
  }

  // Registers a filled source cache on the prefill daemon and an empty one on the decode daemon.
  void MakeRegions(const kv::KvLayoutSpec& src, const kv::KvLayoutSpec& dst) {
    auto s = MakeKvCache(src, 7, true);
    ASSERT_TRUE(s.ok()) << s.status();
    src_ = *std::move(s);
    auto d = MakeKvCache(dst, 0, false);
    ASSERT_TRUE(d.ok()) << d.status();
    dst_ = *std::move(d);
    ASSERT_TRUE(prefill_client_->RegisterRegion("src", src_.proto(), src_.memory->name(), src_.memory->size()).ok());
    ASSERT_TRUE(decode_client_->RegisterRegion("dst", dst_.proto(), dst_.memory->name(), dst_.memory->size()).ok());
  }

  std::vector<uint8_t> DstBytes() const {
    return std::vector<uint8_t>(dst_.memory->data(), dst_.memory->data() + dst_.memory->size());
  }

  ExpectSpec Expectation(const std::string& id, const std::vector<uint32_t>& blocks, uint64_t tokens) {
    ExpectSpec e;
    e.request_id = id;
    e.region_id = "dst";
    e.block_ids = blocks;
    e.num_tokens = tokens;
    e.deadline = absl::Seconds(30);
    return e;
  }

  OfferSpec Offering(const std::string& id, const std::vector<uint32_t>& blocks, uint64_t tokens,
                     const std::string& scheme) {
    OfferSpec o;
    o.request_id = id;
    o.region_id = "src";
    o.block_ids = blocks;
    o.num_tokens = tokens;
    o.scheme = scheme;
    o.decode_daemon = decode_->peer_address();
    o.deadline = absl::Seconds(30);
    for (uint32_t l = 0; l < src_.spec.num_layers; ++l) o.ready_layers.push_back(l);
    return o;
  }

  // Moves the last block of the regions (MakeRegions first; timed transfers leave it alone), so that the daemons'
  // data-plane link is up before a test times a transfer against a deadline. Under a parallel test run its wireup
  // took 0.1-0.6 s, and a daemon stopped while it is still in progress can trip an assertion inside UCX.
  void BringUpLink() {
    const std::vector<uint32_t> last = {kBlocks - 1};
    ASSERT_TRUE(decode_client_->Expect(Expectation("link", last, kBlockTokens)).ok());
    ASSERT_TRUE(prefill_client_->Offer(Offering("link", last, kBlockTokens, "lynx")).ok());
    std::vector<v1::TransferEvent> events;
    ASSERT_TRUE(WatchDecode("link", &events).ok());
  }

  // Events of a request on the decode side until it finishes.
  absl::Status WatchDecode(const std::string& id, std::vector<v1::TransferEvent>* events,
                           absl::Duration timeout = absl::Seconds(30)) {
    return decode_client_->Watch(
        id, [events](const v1::TransferEvent& e) { events->push_back(e); }, timeout, v1::SIDE_DECODE);
  }

  std::unique_ptr<server::Daemon> prefill_;
  std::unique_ptr<server::Daemon> decode_;
  std::unique_ptr<Client> prefill_client_;
  std::unique_ptr<Client> decode_client_;
  KvCache src_;
  KvCache dst_;
};

std::vector<uint32_t> Shuffled(uint32_t n, uint32_t first, uint32_t seed) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), first);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  return ids;
}

class SchemeTransferTest : public TransferTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(SchemeTransferTest, DecodeBlocksHoldExactlyWhatTheCodecDecodes) {
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  const uint64_t tokens = 300;  // 19 blocks; the last page is split into whole chunks and a short tail
  const std::vector<uint32_t> src_blocks = Shuffled(19, 3, 1);
  const std::vector<uint32_t> dst_blocks = Shuffled(19, 20, 2);
  const std::vector<uint8_t> before = DstBytes();
  ASSERT_TRUE(decode_client_->Expect(Expectation("r1", dst_blocks, tokens)).ok());
  ASSERT_TRUE(prefill_client_->Offer(Offering("r1", src_blocks, tokens, GetParam())).ok());
  std::vector<v1::TransferEvent> events;
  ASSERT_TRUE(WatchDecode("r1", &events).ok());

  auto expected = ExpectedAfterTransfer(src_, src_blocks, layout, dst_blocks, tokens, GetParam(), before);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_TRUE(*expected == DstBytes()) << "decode region differs from the codec's full decode";

  // Per layer: ANCHOR_READY before FULL_READY; then DONE last.
  std::vector<int> anchor_at(kLayers, -1), full_at(kLayers, -1);
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind() == v1::TransferEvent::ANCHOR_READY) anchor_at[events[i].layer()] = static_cast<int>(i);
    if (events[i].kind() == v1::TransferEvent::FULL_READY) full_at[events[i].layer()] = static_cast<int>(i);
  }
  for (uint32_t l = 0; l < kLayers; ++l) {
    EXPECT_GE(anchor_at[l], 0) << "layer " << l;
    EXPECT_GT(full_at[l], anchor_at[l]) << "layer " << l;
  }
  EXPECT_EQ(events.back().kind(), v1::TransferEvent::DONE);

  // The prefill side finishes too, and both daemons count the transfer as done.
  EXPECT_TRUE(prefill_client_->Watch("r1", [](const v1::TransferEvent&) {}, absl::Seconds(10)).ok());
  auto stats = decode_client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->transfers_done(), 1u);
  EXPECT_EQ(stats->in_flight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Schemes, SchemeTransferTest, ::testing::Values("lynx", "int8", "int4", "bf16", "lynx-a2r2r4"));

TEST_F(TransferTest, OfferBeforeExpectWaitsForTheRendezvous) {
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  const std::vector<uint32_t> blocks = Shuffled(8, 0, 3);
  const std::vector<uint8_t> before = DstBytes();
  ASSERT_TRUE(prefill_client_->Offer(Offering("late", blocks, 128, "lynx")).ok());
  absl::SleepFor(absl::Milliseconds(300));  // the OpenTransfer call is now waiting on the decode daemon
  ASSERT_TRUE(decode_client_->Expect(Expectation("late", blocks, 128)).ok());
  std::vector<v1::TransferEvent> events;
  ASSERT_TRUE(WatchDecode("late", &events).ok());
  auto expected = ExpectedAfterTransfer(src_, blocks, layout, blocks, 128, "lynx", before);
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(*expected == DstBytes());
}

TEST_F(TransferTest, LayersOfferedOneByOneAllArrive) {
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  const std::vector<uint32_t> blocks = Shuffled(10, 0, 4);
  ASSERT_TRUE(decode_client_->Expect(Expectation("steps", blocks, 160)).ok());
  OfferSpec offer = Offering("steps", blocks, 160, "lynx");
  for (uint32_t l = 0; l < kLayers; ++l) {
    offer.ready_layers = {l};
    ASSERT_TRUE(prefill_client_->Offer(offer).ok()) << "layer " << l;
    EXPECT_TRUE(decode_client_->WaitForLayer("steps", l, Precision::kAnchor, absl::Seconds(10)).ok()) << l;
  }
  std::vector<v1::TransferEvent> events;
  EXPECT_TRUE(WatchDecode("steps", &events).ok());
}

TEST_F(TransferTest, DecodeRegionWithASubsetOfHeadsGetsOnlyThoseHeads) {
  const auto src_layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  // The decode engine shards KV heads two ways; this region holds heads [2, 4).
  const auto dst_layout = DenseLayout(kLayers, kBlocks, kBlockTokens, 2, kHeadDim, kv::KvDType::kBfloat16,
                                      kv::BlockOrder::kHnd, /*head_begin=*/2, /*total_heads=*/kHeads);
  MakeRegions(src_layout, dst_layout);
  const std::vector<uint32_t> blocks = Shuffled(12, 0, 5);
  const std::vector<uint8_t> before = DstBytes();
  ASSERT_TRUE(decode_client_->Expect(Expectation("tp", blocks, 190)).ok());
  ASSERT_TRUE(prefill_client_->Offer(Offering("tp", blocks, 190, "lynx")).ok());
  std::vector<v1::TransferEvent> events;
  ASSERT_TRUE(WatchDecode("tp", &events).ok());
  auto expected = ExpectedAfterTransfer(src_, blocks, dst_layout, blocks, 190, "lynx", before);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_TRUE(*expected == DstBytes());
}

TEST_F(TransferTest, MismatchedLayoutsFailBothSidesWithInvalidArgument) {
  const auto src_layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  const auto dst_layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, 32);  // other head_dim
  MakeRegions(src_layout, dst_layout);
  const std::vector<uint32_t> blocks = Shuffled(4, 0, 6);
  ASSERT_TRUE(decode_client_->Expect(Expectation("bad", blocks, 64)).ok());
  ASSERT_TRUE(prefill_client_->Offer(Offering("bad", blocks, 64, "lynx")).ok());
  absl::Status prefill = prefill_client_->Watch("bad", [](const v1::TransferEvent&) {}, absl::Seconds(10));
  EXPECT_EQ(prefill.code(), absl::StatusCode::kInvalidArgument) << prefill;
  EXPECT_THAT(std::string(prefill.message()), HasSubstr("head_dim"));
}

TEST_F(TransferTest, CancelOnTheDecodeSideStopsBothSidesAndFreesTheRegions) {
  StartDaemons(/*rate_bytes_per_second=*/2e6);  // slow enough to cancel mid-transfer
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  const std::vector<uint32_t> blocks = Shuffled(40, 0, 7);
  ASSERT_TRUE(decode_client_->Expect(Expectation("c", blocks, 640)).ok());
  ASSERT_TRUE(prefill_client_->Offer(Offering("c", blocks, 640, "int8")).ok());
  ASSERT_TRUE(decode_client_->WaitForLayer("c", 0, Precision::kFull, absl::Seconds(10)).ok());
  ASSERT_TRUE(decode_client_->Cancel("c").ok());
  std::vector<v1::TransferEvent> events;
  EXPECT_EQ(WatchDecode("c", &events).code(), absl::StatusCode::kCancelled);
  absl::Status prefill = prefill_client_->Watch("c", [](const v1::TransferEvent&) {}, absl::Seconds(10));
  EXPECT_EQ(prefill.code(), absl::StatusCode::kCancelled) << prefill;
  // Nothing holds the regions any more.
  EXPECT_TRUE(decode_client_->UnregisterRegion("dst").ok());
  EXPECT_TRUE(prefill_client_->UnregisterRegion("src").ok());
}

TEST_F(TransferTest, DeadlineWithAnchorOnlyAllowedFinishesDoneAtAnchorPrecision) {
  // Layer by layer, only the anchors are in place when the deadline hits. lynx anchors are 4.97 of 8.97 bits a
  // value: 2 layers x 2 x 512 x 256 values make ~326 KB of anchors and ~588 KB in all, ~0.82 s and ~1.47 s at
  // 0.4 MB/s; the deadline, 1.15 s, leaves ~0.3 s on either side. A small transfer first brings the data-plane
  // link up, so the timed one does not wait for its wireup: at 1 MB/s with a 0.45 s deadline, on a CI machine
  // running tests in parallel, the link was not up before the deadline and no anchor arrived.
  StartDaemons(/*rate_bytes_per_second=*/0.4e6);
  const auto layout = DenseLayout(2, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  BringUpLink();
  const std::vector<uint32_t> blocks = Shuffled(32, 0, 8);
  ExpectSpec expect = Expectation("ao", blocks, 512);
  expect.deadline = absl::Milliseconds(1150);
  expect.allow_anchor_only = true;
  ASSERT_TRUE(decode_client_->Expect(expect).ok());
  ASSERT_TRUE(prefill_client_->Offer(Offering("ao", blocks, 512, "lynx")).ok());
  std::vector<v1::TransferEvent> events;
  EXPECT_TRUE(WatchDecode("ao", &events).ok());
  int anchors = 0, fulls = 0;
  for (const auto& e : events) {
    anchors += e.kind() == v1::TransferEvent::ANCHOR_READY;
    fulls += e.kind() == v1::TransferEvent::FULL_READY;
  }
  EXPECT_EQ(anchors, 2);
  EXPECT_LT(fulls, 2);
}

TEST_F(TransferTest, DeadlineWithoutAnchorOnlyFailsWithDeadlineExceeded) {
  StartDaemons(/*rate_bytes_per_second=*/1e6);
  const auto layout = DenseLayout(2, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  BringUpLink();
  const std::vector<uint32_t> blocks = Shuffled(32, 0, 9);
  ExpectSpec expect = Expectation("dl", blocks, 512);
  expect.deadline = absl::Milliseconds(200);
  ASSERT_TRUE(decode_client_->Expect(expect).ok());
  ASSERT_TRUE(prefill_client_->Offer(Offering("dl", blocks, 512, "int8")).ok());
  std::vector<v1::TransferEvent> events;
  EXPECT_EQ(WatchDecode("dl", &events).code(), absl::StatusCode::kDeadlineExceeded);
  // The prefill side hears of it and stops too.
  absl::Status prefill = prefill_client_->Watch("dl", [](const v1::TransferEvent&) {}, absl::Seconds(10));
  EXPECT_EQ(prefill.code(), absl::StatusCode::kDeadlineExceeded) << prefill;
}

TEST_F(TransferTest, ManyRequestsInFlightAllComplete) {
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  constexpr int kRequests = 8;
  for (int r = 0; r < kRequests; ++r) {
    const std::vector<uint32_t> blocks = {static_cast<uint32_t>(4 * r), static_cast<uint32_t>(4 * r + 1),
                                          static_cast<uint32_t>(4 * r + 2), static_cast<uint32_t>(4 * r + 3)};
    ASSERT_TRUE(decode_client_->Expect(Expectation(absl::StrCat("m", r), blocks, 64)).ok());
    ASSERT_TRUE(prefill_client_->Offer(Offering(absl::StrCat("m", r), blocks, 64, r % 2 ? "lynx" : "int4")).ok());
  }
  for (int r = 0; r < kRequests; ++r) {
    std::vector<v1::TransferEvent> events;
    EXPECT_TRUE(WatchDecode(absl::StrCat("m", r), &events).ok()) << r;
  }
}

TEST_F(TransferTest, BadRequestsGetCanonicalCodesAndNamedFields) {
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  ExpectSpec e = Expectation("x", {0, 1}, 32);
  e.region_id = "nope";
  EXPECT_EQ(decode_client_->Expect(e).code(), absl::StatusCode::kNotFound);
  e = Expectation("x", {0, 99}, 32);
  absl::Status s = decode_client_->Expect(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  e = Expectation("x", {0, 0}, 32);
  EXPECT_EQ(decode_client_->Expect(e).code(), absl::StatusCode::kInvalidArgument);
  e = Expectation("x", {0, 1}, 32);
  e.deadline = absl::ZeroDuration();
  s = decode_client_->Expect(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("deadline_ms"));
  e = Expectation("bad id with spaces", {0, 1}, 32);
  EXPECT_EQ(decode_client_->Expect(e).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(decode_client_->Expect(Expectation("dup", {0, 1}, 32)).ok());
  EXPECT_EQ(decode_client_->Expect(Expectation("dup", {2, 3}, 32)).code(), absl::StatusCode::kAlreadyExists);
  OfferSpec o = Offering("o", {0, 1}, 32, "lynx9");
  s = prefill_client_->Offer(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("scheme"));
  o = Offering("o", {0, 1}, 32, "lynx");
  o.ready_layers = {kLayers};
  EXPECT_EQ(prefill_client_->Offer(o).code(), absl::StatusCode::kInvalidArgument);
  // A prefill daemon does not take Expect, and a decode daemon does not take Offer.
  EXPECT_EQ(prefill_client_->Expect(Expectation("y", {0, 1}, 32)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decode_client_->Offer(Offering("y", {0, 1}, 32, "lynx")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decode_client_->Cancel("never-seen").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(decode_client_->RegisterRegion("dst", dst_.proto(), dst_.memory->name(), dst_.memory->size()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(decode_client_->RegisterRegion("big", dst_.proto(), dst_.memory->name(), dst_.memory->size() * 2).code(),
            absl::StatusCode::kOutOfRange);
  // A live request pins its region.
  EXPECT_EQ(decode_client_->UnregisterRegion("dst").code(), absl::StatusCode::kFailedPrecondition);
}

// A peer that announces tiny pages of a long request (page_tokens 1) would make the decode daemon build a plan of
// millions of pages it never announced: refused with INVALID_ARGUMENT before anything is built, and the request
// it named fails with that code rather than hanging.
TEST_F(TransferTest, AnOpenWhosePagesCannotCoverItsTokensIsRefusedBeforeAPlanIsBuilt) {
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  const std::vector<uint32_t> blocks = Shuffled(kBlocks, 0, 3);
  const uint64_t tokens = uint64_t{kBlocks} * kBlockTokens;
  ASSERT_TRUE(decode_client_->Expect(Expectation("tiny-pages", blocks, tokens)).ok());
  auto channel = grpc::CreateChannel(decode_->peer_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::KvtPeer::NewStub(channel);
  v1::OpenTransferRequest open;
  open.set_request_id("tiny-pages");
  open.mutable_scheme()->set_name("int8");
  *open.mutable_source_layout() = src_.proto();
  open.set_num_tokens(tokens);
  open.set_page_tokens(1);
  open.set_chunk_tokens(1);
  open.set_source_daemon_id("hostile");
  open.set_deadline_ms(5000);
  v1::PageSpan* page = open.add_pages();
  page->set_tokens(1);
  page->add_stream_bytes(200);
  v1::OpenTransferResponse response;
  grpc::ClientContext call;
  call.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status st = stub->OpenTransfer(&call, open, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("need at least"));
}

TEST_F(TransferTest, UnreachableDecodeDaemonFailsTheOfferWithUnavailable) {
  const auto layout = DenseLayout(kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim);
  MakeRegions(layout, layout);
  OfferSpec o = Offering("u", {0, 1}, 32, "lynx");
  o.decode_daemon = "127.0.0.1:1";  // nothing listens there
  ASSERT_TRUE(prefill_client_->Offer(o).ok());
  absl::Status s = prefill_client_->Watch("u", [](const v1::TransferEvent&) {}, absl::Seconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace kvt::e2e
