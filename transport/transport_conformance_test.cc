// One behavioural suite for every Transport implementation: the loopback fake, UCX over tcp, UCX over shared
// memory. Timing-sensitive properties are asserted by counting chunks and bytes, and rates within wide bounds:
// CI runs on two noisy cores (speed targets live in transport/bench).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"
#include "transport/chunk_header.h"
#include "transport/internal/engine.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/options.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/internal/mutex.h"

namespace kvt::transport {
namespace {

using Factory = std::function<absl::StatusOr<std::unique_ptr<Transport>>(Options)>;

struct Backend {
  std::string name;
  Factory make;
};

std::vector<Backend> Backends() {
  return {
      {"Loopback", [](Options o) { return NewLoopbackTransport(o); }},
      {"UcxTcp",
       [](Options o) {
         o.ucx_tls = "tcp";
         o.ucx_net_devices = "lo";
         return NewUcxTransport(o);
       }},
      {"UcxShm",
       [](Options o) {
         o.ucx_tls = "shm";
         return NewUcxTransport(o);
       }},
      // Chunks striped over two UCX workers per side, each on a thread of its own.
      {"UcxTcpTwoWorkers",
       [](Options o) {
         o.ucx_tls = "tcp";
         o.ucx_net_devices = "lo";
         o.ucx_workers = 2;
         return NewUcxTransport(o);
       }},
      {"UcxShmTwoWorkers",
       [](Options o) {
         o.ucx_tls = "shm";
         o.ucx_workers = 2;
         return NewUcxTransport(o);
       }},
  };
}

constexpr uint32_t kChunk = 64 << 10;

Options SmallChunks() {
  Options o;
  o.chunk_bytes = kChunk;
  o.max_inflight_bytes = 2 << 20;
  o.max_receive_buffer_bytes = 2 << 20;
  o.heartbeat_interval = absl::Milliseconds(100);
  o.peer_timeout = absl::Seconds(2);
  o.stall_timeout = absl::Seconds(20);
  return o;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    const uint32_t x = rng();
    std::memcpy(&v[i], &x, 4);
  }
  for (size_t i = n & ~size_t{3}; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

internal::Engine* AsEngine(Transport* t) { return static_cast<internal::Engine*>(t); }

// A connected sender/receiver pair.
class TransportTest : public ::testing::TestWithParam<Backend> {
 protected:
  void Start(const Options& sender_options, const Options& receiver_options) {
    auto rx = GetParam().make(receiver_options);
    ASSERT_TRUE(rx.ok()) << rx.status();
    receiver_ = *std::move(rx);
    auto tx = GetParam().make(sender_options);
    ASSERT_TRUE(tx.ok()) << tx.status();
    sender_ = *std::move(tx);
    auto peer = sender_->Connect(receiver_->address(), absl::Seconds(20));
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = *peer;
  }
  void Start(const Options& options) { Start(options, options); }

  std::unique_ptr<Transport> receiver_;
  std::unique_ptr<Transport> sender_;
  PeerId peer_ = 0;
};

// Receives every chunk of `id` into `out` (indexed by stream), checking offset order. Returns the status.
absl::Status ReceiveAll(Transport& t, uint64_t id, std::vector<std::vector<uint8_t>>& out,
                        const std::vector<StreamBounds>& bounds, std::vector<uint64_t>* order = nullptr) {
  std::vector<uint64_t> next(bounds.size(), 0);
  while (true) {
    auto c = t.Receive(id, absl::Seconds(30));
    if (!c.ok()) return c.status();
    const ChunkHeader& h = c->header();
    size_t s = 0;
    while (s < bounds.size() && !(bounds[s].page == h.page && bounds[s].stage == h.stage)) ++s;
    if (s == bounds.size()) return absl::InternalError("chunk of an unannounced stream was delivered");
    if (h.offset != next[s]) return absl::InternalError("chunks of a stream came out of offset order");
    next[s] += h.length;
    out[s].resize(bounds[s].length);
    std::memcpy(out[s].data() + h.offset, c->payload().data(), h.length);
    if (order != nullptr) order->push_back(h.stage);
    if (c->transfer_complete()) return absl::OkStatus();
  }
}

TEST_P(TransportTest, MultiMebibyteStreamsArriveIntactAndInOffsetOrder) {
  Start(SmallChunks());
  const std::vector<uint8_t> anchor = RandomBytes((3 << 20) / 2 + 123, 1);
  const std::vector<uint8_t> residual = RandomBytes(3 << 20, 2);
  const std::vector<uint8_t> other_page = RandomBytes(100000, 3);
  const std::vector<StreamBounds> bounds = {
      {5, 0, anchor.size()}, {5, 1, residual.size()}, {6, 0, other_page.size()}};
  ASSERT_TRUE(receiver_->Expect(42, bounds).ok());
  auto handle = sender_->Send(peer_, 42, {{5, 0, anchor}, {5, 1, residual}, {6, 0, other_page}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<std::vector<uint8_t>> got(3);
  std::vector<uint64_t> stages;
  ASSERT_TRUE(ReceiveAll(*receiver_, 42, got, bounds, &stages).ok());
  EXPECT_TRUE((*handle)->Wait().ok()) << (*handle)->status();
  EXPECT_EQ(got[0], anchor);
  EXPECT_EQ(got[1], residual);
  EXPECT_EQ(got[2], other_page);
  // With no starvation, every anchor chunk (both pages) precedes every residual chunk on one FIFO path. Over
  // several UCX workers the engine holds residuals until the anchors' sends completed, which orders arrival for
  // rendezvous-sized chunks; these 64 KiB ones may go eager, completing when they leave, so a residual may
  // overtake an anchor still in another worker's socket: at most a window's worth of chunks.
  if (GetParam().name.find("Workers") == std::string::npos) {
    EXPECT_TRUE(std::is_sorted(stages.begin(), stages.end()));
  } else {
    const auto last_anchor = std::find(stages.rbegin(), stages.rend(), 0u);
    ASSERT_NE(last_anchor, stages.rend());
    const auto overtaking = std::count_if(last_anchor, stages.rend(), [](uint64_t st) { return st != 0; });
    EXPECT_LE(overtaking, SmallChunks().max_inflight_bytes / kChunk) << "residual chunks ahead of the last anchor";
  }
  const TransportStats rx = receiver_->stats();
  EXPECT_EQ(rx.payload_bytes_received, anchor.size() + residual.size() + other_page.size());
  EXPECT_EQ(rx.rejected_bad_crc + rx.rejected_malformed + rx.rejected_out_of_bounds, 0u);
  EXPECT_EQ(receiver_->Receive(42, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(TransportTest, AnchorOfALaterTransferOvertakesResidualsAlreadyQueued) {
  Options o = SmallChunks();
  o.rate_bytes_per_second = 40e6;  // ~1.6 ms per chunk: residual A is still queued when B arrives
  o.starvation_bound = absl::Seconds(60);
  Start(o);
  const auto a_anchor = RandomBytes(4 * kChunk, 10), a_residual = RandomBytes(48 * kChunk, 11);
  const auto b_anchor = RandomBytes(8 * kChunk, 12), b_residual = RandomBytes(8 * kChunk, 13);
  ASSERT_TRUE(receiver_->Expect(1, {{0, 0, a_anchor.size()}, {0, 1, a_residual.size()}}).ok());
  ASSERT_TRUE(receiver_->Expect(2, {{0, 0, b_anchor.size()}, {0, 1, b_residual.size()}}).ok());

  // Each chunk is logged with its arrival sequence, so the check sees wire order, not reader scheduling.
  internal::Mutex mu;
  std::vector<std::tuple<uint64_t, uint64_t, int>> log;  // (arrival sequence, transfer, stage)
  std::atomic<bool> a_residual_started{false};
  auto drain = [&](uint64_t id) {
    while (true) {
      auto c = receiver_->Receive(id, absl::Seconds(30));
      if (!c.ok()) return;
      {
        internal::MutexLock lock(&mu);
        log.emplace_back(c->arrival_sequence(), id, c->header().stage);
      }
      if (id == 1 && c->header().stage == 1) a_residual_started = true;
      if (c->transfer_complete()) return;
    }
  };
  std::thread rx_a(drain, 1), rx_b(drain, 2);
  auto a = sender_->Send(peer_, 1, {{0, 0, a_anchor}, {0, 1, a_residual}});
  ASSERT_TRUE(a.ok()) << a.status();
  while (!a_residual_started) absl::SleepFor(absl::Milliseconds(1));
  // Chunks of A already handed to the wire when B is queued: the receiver may not have counted them yet (they
  // can still be in its verification queue), so the sender's count marks the point B was queued at.
  const uint64_t sent_before_submit = sender_->stats().chunks_sent;
  auto b = sender_->Send(peer_, 2, {{0, 0, b_anchor}, {0, 1, b_residual}});
  ASSERT_TRUE(b.ok()) << b.status();
  rx_a.join();
  rx_b.join();
  ASSERT_TRUE((*a)->Wait().ok());
  ASSERT_TRUE((*b)->Wait().ok());

  ASSERT_EQ(log.size(), 4u + 48u + 8u + 8u);
  std::sort(log.begin(), log.end());
  size_t b_anchor_first = log.size(), b_anchor_done = 0, a_residual_done = 0, b_anchor_seen = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    ASSERT_EQ(std::get<0>(log[i]), i) << "arrival sequences are dense";
    const auto [seq, id, stage] = log[i];
    if (id == 2 && stage == 0) {
      b_anchor_first = std::min(b_anchor_first, i);
      if (++b_anchor_seen == 8) b_anchor_done = i;
    }
    if (id == 1 && stage == 1) a_residual_done = i;
  }
  size_t a_residual_after_submit = 0, a_residual_inside_b_anchor = 0;
  for (size_t i = sent_before_submit; i < b_anchor_done; ++i) {
    if (std::get<1>(log[i]) == 1 && std::get<2>(log[i]) == 1) {
      ++a_residual_after_submit;
      if (i > b_anchor_first) ++a_residual_inside_b_anchor;
    }
  }
  EXPECT_LT(b_anchor_done, a_residual_done) << "B's anchor must finish while A's residual is still going";
  // Once B's anchor is moving, no residual chunk comes between its chunks...
  EXPECT_EQ(a_residual_inside_b_anchor, 0u);
  // ... and before it, only chunks already paced onto the wire (the bucket's burst) plus one in progress.
  EXPECT_LE(a_residual_after_submit, 4u);
  EXPECT_EQ(sender_->stats().promoted_chunks_sent, 0u);
}

TEST_P(TransportTest, ResidualStarvedPastTheBoundIsPromotedBeforeTheAnchorsFinish) {
  Options o = SmallChunks();
  o.rate_bytes_per_second = 20e6;  // 40 anchor chunks take ~130 ms
  o.starvation_bound = absl::Milliseconds(20);
  Start(o);
  const auto residual = RandomBytes(2 * kChunk, 20);
  const auto anchor = RandomBytes(40 * kChunk, 21);
  ASSERT_TRUE(receiver_->Expect(7, {{0, 1, residual.size()}, {1, 0, anchor.size()}}).ok());
  auto h = sender_->Send(peer_, 7, {{0, 1, residual}, {1, 0, anchor}});
  ASSERT_TRUE(h.ok());
  std::vector<std::vector<uint8_t>> got(2);
  std::vector<uint64_t> stages;
  ASSERT_TRUE(ReceiveAll(*receiver_, 7, got, {{0, 1, residual.size()}, {1, 0, anchor.size()}}, &stages).ok());
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(got[0], residual);
  EXPECT_EQ(got[1], anchor);
  // The residual was not left until the end: its last chunk came before the last anchor chunk...
  const auto last_residual = std::find(stages.rbegin(), stages.rend(), 1u);
  EXPECT_NE(last_residual, stages.rbegin());
  // ... but it did wait: anchors went first until the bound passed.
  EXPECT_EQ(stages.front(), 0u);
  EXPECT_GE(sender_->stats().promoted_chunks_sent, 1u);
}

TEST_P(TransportTest, ThrottledLinkDeliversCloseToTheConfiguredRate) {
  Options o = SmallChunks();
  o.rate_bytes_per_second = 25e6;
  Start(o);
  const auto data = RandomBytes(6 << 20, 30);  // ~250 ms at 25 MB/s
  ASSERT_TRUE(receiver_->Expect(9, {{0, 0, data.size()}}).ok());
  const absl::Time start = absl::Now();
  auto h = sender_->Send(peer_, 9, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  std::vector<std::vector<uint8_t>> got(1);
  ASSERT_TRUE(ReceiveAll(*receiver_, 9, got, {{0, 0, data.size()}}).ok());
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_TRUE((*h)->Wait().ok());
  const double rate = data.size() / seconds;
  // The first burst (two chunks) goes at once; everything else is paced.
  EXPECT_LT(rate, 1.15 * o.rate_bytes_per_second) << seconds << " s";
  EXPECT_GT(rate, 0.5 * o.rate_bytes_per_second) << seconds << " s";
}

TEST_P(TransportTest, ReceiverThatStopsReadingHoldsTheSenderWithinTheWindow) {
  Options o = SmallChunks();
  o.max_inflight_bytes = 16 << 20;
  Options rx = o;
  rx.max_receive_buffer_bytes = 8 * (kChunk + kChunkHeaderBytes);
  Start(o, rx);
  const auto data = RandomBytes(4 << 20, 40);
  ASSERT_TRUE(receiver_->Expect(3, {{0, 0, data.size()}}).ok());
  auto h = sender_->Send(peer_, 3, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  // Nobody reads for a while: the sender must stop at the receiver's buffer, not finish.
  EXPECT_FALSE((*h)->WaitFor(absl::Milliseconds(400)));
  EXPECT_LE(sender_->stats().max_inflight_bytes_seen, rx.max_receive_buffer_bytes);
  EXPECT_LE(receiver_->stats().max_receive_buffered_bytes_seen, rx.max_receive_buffer_bytes);
  EXPECT_LE(receiver_->stats().payload_bytes_received, 8u * kChunk);
  std::vector<std::vector<uint8_t>> got(1);
  ASSERT_TRUE(ReceiveAll(*receiver_, 3, got, {{0, 0, data.size()}}).ok());
  EXPECT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(got[0], data);
  EXPECT_EQ(receiver_->stats().rejected_over_window, 0u);
}

TEST_P(TransportTest, ReceiverThatNeverReadsFailsTheSenderWithDeadlineExceeded) {
  Options o = SmallChunks();
  o.stall_timeout = absl::Milliseconds(300);
  Options rx = o;
  rx.max_receive_buffer_bytes = 4 * (kChunk + kChunkHeaderBytes);
  Start(o, rx);
  const auto data = RandomBytes(2 << 20, 50);
  ASSERT_TRUE(receiver_->Expect(4, {{0, 0, data.size()}}).ok());
  auto h = sender_->Send(peer_, 4, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->WaitFor(absl::Seconds(20)));
  EXPECT_EQ((*h)->status().code(), absl::StatusCode::kDeadlineExceeded) << (*h)->status();
  EXPECT_EQ(sender_->stats().transfers_stalled, 1u);
}

TEST_P(TransportTest, PeerDestroyedMidStreamFailsTheSenderWithUnavailable) {
  Options o = SmallChunks();
  o.rate_bytes_per_second = 20e6;
  Start(o);
  const auto data = RandomBytes(8 << 20, 60);
  ASSERT_TRUE(receiver_->Expect(5, {{0, 0, data.size()}}).ok());
  auto h = sender_->Send(peer_, 5, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  auto first = receiver_->Receive(5, absl::Seconds(20));
  ASSERT_TRUE(first.ok()) << first.status();
  first = absl::CancelledError("dropped");
  const absl::Time killed = absl::Now();
  receiver_.reset();
  ASSERT_TRUE((*h)->WaitFor(absl::Seconds(20)));
  EXPECT_EQ((*h)->status().code(), absl::StatusCode::kUnavailable) << (*h)->status();
  // An orderly shutdown announces itself (kGoodbye): the sender learns why, rather than timing the link out.
  EXPECT_NE((*h)->status().message().find("peer shut down"), absl::string_view::npos) << (*h)->status();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(15));
  EXPECT_EQ(sender_->Send(peer_, 6, {{0, 0, data}}).status().code(), absl::StatusCode::kUnavailable);
}

TEST_P(TransportTest, AShutdownWaitsOnlyBrieflyForAPeerThatCannotAnswerItsGoodbye) {
  // The shutting side waits for its peers to answer kGoodbye; a hung peer never does, and must not hold it.
  Start(SmallChunks());
  const auto data = RandomBytes(1 << 20, 65);
  ASSERT_TRUE(receiver_->Expect(9, {{0, 0, data.size()}}).ok());
  auto h = sender_->Send(peer_, 9, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  std::vector<std::vector<uint8_t>> got(1);
  ASSERT_TRUE(ReceiveAll(*receiver_, 9, got, {{0, 0, data.size()}}).ok());
  ASSERT_TRUE((*h)->Wait().ok());
  AsEngine(sender_.get())->FreezeForTest();
  const absl::Time start = absl::Now();
  receiver_.reset();
  // The goodbye wait (500 ms) and nothing more: a hung peer holds nothing else of a shutdown.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_P(TransportTest, HungPeerIsDetectedByHeartbeatAndFailsBothSidesWithUnavailable) {
  Options o = SmallChunks();
  o.rate_bytes_per_second = 20e6;
  o.peer_timeout = absl::Milliseconds(800);
  Start(o);
  const auto data = RandomBytes(8 << 20, 70);
  ASSERT_TRUE(receiver_->Expect(8, {{0, 0, data.size()}}).ok());
  auto h = sender_->Send(peer_, 8, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(receiver_->Receive(8, absl::Seconds(20)).ok());
  AsEngine(sender_.get())->FreezeForTest();  // the sender hangs: no data, no heartbeats
  absl::Status last;
  do {
    last = receiver_->Receive(8, absl::Seconds(20)).status();
  } while (last.ok());
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
  // The hung sender still holds `data` for its unfinished transfer: shut it down before `data` goes.
  sender_.reset();
  EXPECT_TRUE((*h)->WaitFor(absl::ZeroDuration()));
}

TEST_P(TransportTest, CorruptChunkFailsOnlyItsOwnTransferWithDataLoss) {
  Start(SmallChunks());
  const auto good = RandomBytes(1 << 20, 80);
  ASSERT_TRUE(receiver_->Expect(100, {{0, 0, 4096}}).ok());
  ASSERT_TRUE(receiver_->Expect(101, {{0, 0, good.size()}}).ok());
  // A chunk for transfer 100 whose payload does not match its CRC.
  std::vector<uint8_t> payload = RandomBytes(4096, 81);
  ChunkHeader h{100, 0, 0, 0, 4096, Crc32c(payload.data(), payload.size())};
  payload[17] ^= 0x20;
  std::vector<uint8_t> header(kChunkHeaderBytes);
  EncodeChunkHeader(h, absl::MakeSpan(header));
  ASSERT_TRUE(AsEngine(sender_.get())->SendRawChunkForTest(peer_, header, payload).ok());
  EXPECT_EQ(receiver_->Receive(100, absl::Seconds(20)).status().code(), absl::StatusCode::kDataLoss);
  // The other transfer on the same link is untouched.
  auto handle = sender_->Send(peer_, 101, {{0, 0, good}});
  ASSERT_TRUE(handle.ok());
  std::vector<std::vector<uint8_t>> got(1);
  ASSERT_TRUE(ReceiveAll(*receiver_, 101, got, {{0, 0, good.size()}}).ok());
  EXPECT_EQ(got[0], good);
  EXPECT_TRUE((*handle)->Wait().ok());
  EXPECT_EQ(receiver_->stats().rejected_bad_crc, 1u);
}

TEST_P(TransportTest, HostileChunksAreRejectedCountedAndHarmNoOtherTransfer) {
  Start(SmallChunks());
  ASSERT_TRUE(receiver_->Expect(200, {{0, 0, 1000}}).ok());
  ASSERT_TRUE(receiver_->Expect(201, {{0, 0, 1000}}).ok());
  auto raw = [&](ChunkHeader h, std::vector<uint8_t> payload) {
    h.payload_crc32c = Crc32c(payload.data(), payload.size());
    std::vector<uint8_t> header(kChunkHeaderBytes);
    EncodeChunkHeader(h, absl::MakeSpan(header));
    return AsEngine(sender_.get())->SendRawChunkForTest(peer_, header, payload);
  };
  // Unknown transfer: counted, nobody fails.
  ASSERT_TRUE(raw({999, 0, 0, 0, 10, 0}, std::vector<uint8_t>(10, 1)).ok());
  // Offset outside the announced stream: fails transfer 200 only.
  ASSERT_TRUE(raw({200, 0, 0, 995, 10, 0}, std::vector<uint8_t>(10, 2)).ok());
  // Garbage header: counted.
  ASSERT_TRUE(AsEngine(sender_.get())
                  ->SendRawChunkForTest(peer_, std::vector<uint8_t>(kChunkHeaderBytes, 0x5a), {1, 2, 3})
                  .ok());
  // Header length disagreeing with the payload: counted.
  ASSERT_TRUE(AsEngine(sender_.get())
                  ->SendRawChunkForTest(peer_,
                                        [] {
                                          std::vector<uint8_t> hb(kChunkHeaderBytes);
                                          EncodeChunkHeader({201, 0, 0, 0, 500, 0}, absl::MakeSpan(hb));
                                          return hb;
                                        }(),
                                        std::vector<uint8_t>(20, 3))
                  .ok());
  EXPECT_EQ(receiver_->Receive(200, absl::Seconds(20)).status().code(), absl::StatusCode::kOutOfRange);
  // A valid chunk for transfer 201 still lands.
  ASSERT_TRUE(raw({201, 0, 0, 0, 1000, 0}, std::vector<uint8_t>(1000, 4)).ok());
  auto c = receiver_->Receive(201, absl::Seconds(20));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->transfer_complete());
  // Over a wire striped across several UCX workers the hostile chunks, sent before, may be handled after it.
  TransportStats s = receiver_->stats();
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (s.rejected_unknown_transfer + s.rejected_out_of_bounds + s.rejected_malformed < 4 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(2));
    s = receiver_->stats();
  }
  EXPECT_EQ(s.rejected_unknown_transfer, 1u);
  EXPECT_EQ(s.rejected_out_of_bounds, 1u);
  EXPECT_EQ(s.rejected_malformed, 2u);
}

TEST_P(TransportTest, SenderOfATransferTheReceiverRejectsLearnsTheReason) {
  Start(SmallChunks());
  const auto data = RandomBytes(256 << 10, 90);
  ASSERT_TRUE(receiver_->Expect(300, {{0, 0, 1000}}).ok());  // announced far shorter than what comes
  auto h = sender_->Send(peer_, 300, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->WaitFor(absl::Seconds(20)));
  EXPECT_EQ(receiver_->Receive(300, absl::Seconds(20)).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*h)->status().code(), absl::StatusCode::kOutOfRange) << (*h)->status();
}

TEST_P(TransportTest, TransferTheReceiverDoesNotExpectFailsWithNotFound) {
  Start(SmallChunks());
  const auto data = RandomBytes(100000, 91);
  auto h = sender_->Send(peer_, 301, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->WaitFor(absl::Seconds(20)));
  EXPECT_EQ((*h)->status().code(), absl::StatusCode::kNotFound) << (*h)->status();
  EXPECT_GE(receiver_->stats().rejected_unknown_transfer, 1u);
}

TEST_P(TransportTest, SenderFinishesOnlyAfterTheReceiverHasEveryByte) {
  Start(SmallChunks());
  const auto data = RandomBytes(1 << 20, 92);  // fits the receive buffer: no reader needed
  ASSERT_TRUE(receiver_->Expect(302, {{0, 0, data.size()}}).ok());
  auto h = sender_->Send(peer_, 302, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().ok());
  // Finished means acknowledged: every chunk is already at the receiver, nothing is still on its way.
  EXPECT_EQ(receiver_->stats().payload_bytes_received, data.size());
  std::vector<std::vector<uint8_t>> got(1);
  ASSERT_TRUE(ReceiveAll(*receiver_, 302, got, {{0, 0, data.size()}}).ok());
  EXPECT_EQ(got[0], data);
}

TEST_P(TransportTest, OneReceiveAnyConsumerDrainsTwoInterleavedTransfersIntact) {
  Options o = SmallChunks();
  Options rx = o;
  rx.max_receive_buffer_bytes = 8 * (kChunk + kChunkHeaderBytes);
  Start(o, rx);
  struct Inbound {
    std::vector<std::vector<uint8_t>> sent;
    std::vector<StreamBounds> bounds;
    std::vector<std::vector<uint8_t>> got;
    std::vector<uint64_t> next;
    bool complete = false;
  };
  std::map<uint64_t, Inbound> inbound;
  inbound[11].sent = {RandomBytes(4 * kChunk + 100, 110), RandomBytes(24 * kChunk + 7, 111)};
  inbound[12].sent = {RandomBytes(3 * kChunk + 5, 112), RandomBytes(20 * kChunk, 113)};
  std::vector<std::shared_ptr<SendHandle>> handles;
  for (auto& [id, in] : inbound) {
    const uint32_t page = static_cast<uint32_t>(id);
    in.bounds = {{page, 0, in.sent[0].size()}, {page, 1, in.sent[1].size()}};
    in.got.resize(2);
    in.next.assign(2, 0);
    ASSERT_TRUE(receiver_->Expect(id, in.bounds).ok());
  }
  for (auto& [id, in] : inbound) {
    const uint32_t page = static_cast<uint32_t>(id);
    auto h = sender_->Send(peer_, id, {{page, 0, in.sent[0]}, {page, 1, in.sent[1]}});
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  // Nobody read while both were queued: 11 (29 chunks) cannot have finished within the 8-chunk receive buffer,
  // so chunks of both are waiting for the one consumer.
  std::vector<uint64_t> order;  // transfer of each chunk, as ReceiveAny handed them out
  std::set<uint64_t> arrivals;
  while (!inbound[11].complete || !inbound[12].complete) {
    auto event = receiver_->ReceiveAny(absl::Seconds(30));
    ASSERT_TRUE(event.ok()) << event.status();
    ASSERT_TRUE(event->status.ok()) << event->transfer_id << ": " << event->status;
    ASSERT_TRUE(event->chunk.has_value());
    auto it = inbound.find(event->transfer_id);
    ASSERT_NE(it, inbound.end()) << event->transfer_id;
    Inbound& in = it->second;
    ASSERT_FALSE(in.complete) << "chunk after the last one of transfer " << event->transfer_id;
    const ChunkHeader& h = event->chunk->header();
    ASSERT_EQ(h.transfer_id, event->transfer_id);
    ASSERT_EQ(h.page, event->transfer_id);
    ASSERT_LT(h.stage, 2);
    ASSERT_EQ(h.offset, in.next[h.stage]) << "chunks of a stream came out of offset order";
    in.next[h.stage] += h.length;
    in.got[h.stage].resize(in.bounds[h.stage].length);
    std::memcpy(in.got[h.stage].data() + h.offset, event->chunk->payload().data(), h.length);
    EXPECT_TRUE(arrivals.insert(event->chunk->arrival_sequence()).second) << "chunk handed out twice";
    in.complete = event->chunk->transfer_complete();
    order.push_back(event->transfer_id);
  }
  for (const auto& h : handles) EXPECT_TRUE(h->Wait().ok()) << h->status();
  for (const auto& [id, in] : inbound) {
    EXPECT_EQ(in.got[0], in.sent[0]) << id;
    EXPECT_EQ(in.got[1], in.sent[1]) << id;
  }
  EXPECT_EQ(order.size(), 5u + 25u + 4u + 20u);
  size_t first_of_12 = order.size(), last_of_11 = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] == 12 && first_of_12 == order.size()) first_of_12 = i;
    if (order[i] == 11) last_of_11 = i;
  }
  EXPECT_LT(first_of_12, last_of_11) << "the two transfers were not interleaved";
  EXPECT_EQ(receiver_->ReceiveAny(absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(receiver_->Receive(11, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(TransportTest, ReceiveAnyReportsUnavailableForABoundTransferWhenThePeerLinkGoesDown) {
  Options o = SmallChunks();
  o.rate_bytes_per_second = 20e6;
  Start(o);
  const auto data = RandomBytes(8 << 20, 120);
  ASSERT_TRUE(receiver_->Expect(500, {{0, 0, data.size()}}).ok());
  ASSERT_TRUE(receiver_->Expect(501, {{0, 0, 1000}}).ok());  // never sent: bound to no link
  auto h = sender_->Send(peer_, 500, {{0, 0, data}});
  ASSERT_TRUE(h.ok()) << h.status();
  {
    auto first = receiver_->ReceiveAny(absl::Seconds(20));
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->transfer_id, 500u);
    ASSERT_TRUE(first->chunk.has_value()) << first->status;
  }
  sender_.reset();  // 8 MiB cannot have arrived: the receiver holds most of it back by credit
  // Chunks that arrived before the link went down may come first; then the failure, once.
  absl::StatusOr<InboundEvent> failure = absl::UnknownError("no failure reported");
  while (true) {
    failure = receiver_->ReceiveAny(absl::Seconds(20));
    ASSERT_TRUE(failure.ok()) << failure.status();
    if (!failure->status.ok()) break;
    EXPECT_EQ(failure->transfer_id, 500u);
    ASSERT_TRUE(failure->chunk.has_value());
    ASSERT_FALSE(failure->chunk->transfer_complete());
  }
  EXPECT_EQ(failure->transfer_id, 500u);
  EXPECT_EQ(failure->status.code(), absl::StatusCode::kUnavailable) << failure->status;
  EXPECT_FALSE(failure->chunk.has_value());
  EXPECT_TRUE((*h)->WaitFor(absl::ZeroDuration()));
  EXPECT_EQ(receiver_->ReceiveAny(absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(receiver_->Receive(500, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(receiver_->Receive(501, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_P(TransportTest, BadRequestsGetCanonicalCodes) {
  Start(SmallChunks());
  const std::vector<uint8_t> data(100, 1);
  EXPECT_EQ(sender_->Send(peer_ + 1000, 1, {{0, 0, data}}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sender_->Send(peer_, 1, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sender_->Send(peer_, 1, {{0, kMaxStages, data}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sender_->Send(peer_, 1, {{0, 0, data}, {0, 0, data}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver_->Receive(77, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(receiver_->ReceiveAny(absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(sender_->Connect("definitely not an address", absl::Seconds(2)).ok());
}

TEST_P(TransportTest, CancelFinishesTheSenderWithCancelled) {
  Options o = SmallChunks();
  o.rate_bytes_per_second = 10e6;
  Start(o);
  const auto data = RandomBytes(8 << 20, 95);
  ASSERT_TRUE(receiver_->Expect(400, {{0, 0, data.size()}}).ok());
  auto h = sender_->Send(peer_, 400, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  sender_->Cancel(400);
  ASSERT_TRUE((*h)->WaitFor(absl::Seconds(20)));
  EXPECT_EQ((*h)->status().code(), absl::StatusCode::kCancelled);
  receiver_->Cancel(400);
  EXPECT_EQ(receiver_->Receive(400, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
}

// Placement: the receiver names where each stream lands; chunks are written there and handed out pointing there.
TEST_P(TransportTest, StreamsWithADestinationLandInPlaceAndTheirChunksPointThere) {
  Start(SmallChunks());
  const std::vector<uint8_t> anchor = RandomBytes(700000, 11);
  const std::vector<uint8_t> residual = RandomBytes(500001, 12);
  const std::vector<uint8_t> unplaced = RandomBytes(90000, 13);
  // One block for both placed streams, with a guard band around each that nothing may touch.
  constexpr size_t kGuard = 4096;
  auto memory = std::make_shared<std::vector<uint8_t>>(anchor.size() + residual.size() + 3 * kGuard, 0xA5);
  uint8_t* base = memory->data();
  uint8_t* anchor_at = base + kGuard;
  uint8_t* residual_at = anchor_at + anchor.size() + kGuard;
  const std::vector<StreamBounds> bounds = {
      {3, 0, anchor.size(), anchor_at}, {3, 1, residual.size(), residual_at}, {4, 0, unplaced.size(), nullptr}};
  std::weak_ptr<std::vector<uint8_t>> alive = memory;
  ASSERT_TRUE(receiver_->Expect(77, bounds, /*link_group=*/0, memory).ok());
  auto handle = sender_->Send(peer_, 77, {{3, 0, anchor}, {3, 1, residual}, {4, 0, unplaced}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<uint8_t> got_unplaced(unplaced.size());
  while (true) {
    auto c = receiver_->Receive(77, absl::Seconds(30));
    ASSERT_TRUE(c.ok()) << c.status();
    const ChunkHeader& h = c->header();
    if (h.page == 3) {
      uint8_t* expected = (h.stage == 0 ? anchor_at : residual_at) + h.offset;
      EXPECT_EQ(c->payload().data(), expected) << "a placed chunk must point into its destination";
    } else {
      EXPECT_TRUE(c->payload().data() < base || c->payload().data() >= base + memory->size());
      std::memcpy(got_unplaced.data() + h.offset, c->payload().data(), h.length);
    }
    if (c->transfer_complete()) break;
  }
  EXPECT_TRUE((*handle)->Wait().ok()) << (*handle)->status();
  EXPECT_TRUE(std::equal(anchor.begin(), anchor.end(), anchor_at));
  EXPECT_TRUE(std::equal(residual.begin(), residual.end(), residual_at));
  EXPECT_EQ(got_unplaced, unplaced);
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(base[i], 0xA5) << "written before the first destination";
    ASSERT_EQ(anchor_at[anchor.size() + i], 0xA5) << "written between the destinations";
    ASSERT_EQ(residual_at[residual.size() + i], 0xA5) << "written after the last destination";
  }
  // The transfer is gone: the transport let go of the receiver's memory.
  memory.reset();
  EXPECT_TRUE(alive.expired());
}

// A placed transfer that fails (here: cancelled by the receiver mid-stream) releases its memory once no read into
// it is pending, and the link goes on carrying other transfers.
TEST_P(TransportTest, ACancelledPlacedTransferLetsGoOfItsMemoryAndHarmsNoOther) {
  Options o = SmallChunks();
  // Slow enough (4 MiB take ~2 s) that the receiver's cancel lands mid-stream even when this thread is descheduled
  // for a while on a loaded machine; at 20 MB/s the margin was ~200 ms and the transfer could finish first.
  o.rate_bytes_per_second = 2e6;
  Start(o);
  const auto data = RandomBytes(4 << 20, 21);
  auto memory = std::make_shared<std::vector<uint8_t>>(data.size());
  std::weak_ptr<std::vector<uint8_t>> alive = memory;
  ASSERT_TRUE(receiver_->Expect(500, {{0, 0, data.size(), memory->data()}}, 0, memory).ok());
  memory.reset();  // the transport's reference alone keeps it now
  auto h = sender_->Send(peer_, 500, {{0, 0, data}});
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(receiver_->Receive(500, absl::Seconds(20)).ok());  // some bytes landed
  receiver_->Cancel(500);
  ASSERT_TRUE((*h)->WaitFor(absl::Seconds(20)));
  EXPECT_FALSE((*h)->status().ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!alive.expired() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(alive.expired()) << "the transport still holds a cancelled transfer's memory";
  const auto other = RandomBytes(300000, 22);
  ASSERT_TRUE(receiver_->Expect(501, {{0, 0, other.size()}}).ok());
  auto h2 = sender_->Send(peer_, 501, {{0, 0, other}});
  ASSERT_TRUE(h2.ok());
  std::vector<std::vector<uint8_t>> got(1);
  ASSERT_TRUE(ReceiveAll(*receiver_, 501, got, {{0, 0, other.size()}}).ok());
  EXPECT_EQ(got[0], other);
}

INSTANTIATE_TEST_SUITE_P(AllTransports, TransportTest, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace kvt::transport
