#include "transport/internal/transfer_table.h"

#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvt::transport {
namespace {

class CountingCredit final : public CreditReturn {
 public:
  void Return(int64_t bytes) override { returned += bytes; }
  std::atomic<int64_t> returned{0};
};

ChunkHeader Header(uint64_t id, uint32_t page, uint8_t stage, uint64_t offset, uint32_t length) {
  ChunkHeader h;
  h.transfer_id = id;
  h.page = page;
  h.stage = stage;
  h.offset = offset;
  h.length = length;
  return h;
}

PayloadBuffer Bytes(uint32_t n, uint8_t fill) {
  PayloadBuffer b(new uint8_t[n]);
  std::memset(b.get(), fill, n);
  return b;
}

TEST(TransferTableTest, ChunksAreHandedOutInOffsetOrderEvenWhenTheyArriveOutOfOrder) {
  TransferTable table;
  auto credit = std::make_shared<CountingCredit>();
  ASSERT_TRUE(table.Expect(1, {{0, 0, 30}}).ok());
  for (uint64_t off : {20, 0, 10}) {
    ASSERT_TRUE(table.Admit(5, Header(1, 0, 0, off, 10)).ok());
  }
  table.Deliver(Header(1, 0, 0, 20, 10), Bytes(10, 2), 10, credit);
  EXPECT_EQ(table.Receive(1, absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
  table.Deliver(Header(1, 0, 0, 0, 10), Bytes(10, 0), 10, credit);
  table.Deliver(Header(1, 0, 0, 10, 10), Bytes(10, 1), 10, credit);
  for (uint64_t expected : {0, 10, 20}) {
    auto c = table.Receive(1, absl::Seconds(1));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->header().offset, expected);
    EXPECT_EQ(c->arrival_sequence(), expected / 10);
    EXPECT_EQ(c->payload()[0], expected / 10);
    EXPECT_EQ(c->transfer_complete(), expected == 20);
  }
  EXPECT_EQ(credit->returned.load(), 30);
  EXPECT_EQ(table.Receive(1, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
}

TEST(TransferTableTest, UnknownTransferIsNotFoundAndKnownOneBindsToItsFirstLink) {
  TransferTable table;
  EXPECT_EQ(table.Admit(1, Header(9, 0, 0, 0, 1)).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table.Expect(9, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Admit(1, Header(9, 0, 0, 0, 5)).ok());
  EXPECT_EQ(table.Admit(2, Header(9, 0, 0, 5, 5)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table.Admit(1, Header(9, 0, 0, 5, 5)).ok());  // the other link did not hurt the transfer
}

TEST(TransferTableTest, OutOfBoundsOverlappingAndUnknownStreamChunksFailTheTransferWithOutOfRange) {
  for (const ChunkHeader& bad : {Header(3, 0, 0, 8, 4), Header(3, 1, 0, 0, 4), Header(3, 0, 1, 0, 4),
                                 Header(3, 0, 0, 2, 2), Header(3, 0, 0, 0, 0)}) {
    TransferTable table;
    ASSERT_TRUE(table.Expect(3, {{0, 0, 10}}).ok());
    ASSERT_TRUE(table.Admit(1, Header(3, 0, 0, 0, 4)).ok());
    EXPECT_EQ(table.Admit(1, bad).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(table.Receive(3, absl::Seconds(1)).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(table.size(), 0u);
  }
}

TEST(TransferTableTest, FailingOneTransferLeavesOthersAndReturnsCreditOfDroppedChunks) {
  TransferTable table;
  auto credit = std::make_shared<CountingCredit>();
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Admit(1, Header(1, 0, 0, 0, 5)).ok());
  table.Deliver(Header(1, 0, 0, 0, 5), Bytes(5, 0), 45, credit);
  table.Fail(1, absl::DataLossError("bad crc"));
  EXPECT_EQ(credit->returned.load(), 45);
  EXPECT_EQ(table.Receive(1, absl::Seconds(1)).status().code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(table.Admit(1, Header(2, 0, 0, 0, 10)).ok());
  table.Deliver(Header(2, 0, 0, 0, 10), Bytes(10, 7), 50, credit);
  auto c = table.Receive(2, absl::Seconds(1));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->transfer_complete());
}

TEST(TransferTableTest, FailLinkFailsOnlyTransfersBoundToThatLink) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Admit(7, Header(1, 0, 0, 0, 5)).ok());
  ASSERT_TRUE(table.Admit(8, Header(2, 0, 0, 0, 5)).ok());
  table.FailLink(7, absl::UnavailableError("peer gone"));
  EXPECT_EQ(table.Receive(1, absl::Seconds(1)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(table.Receive(2, absl::Milliseconds(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(TransferTableTest, TheFirstChunkOfALinkGroupBindsTheWholeGroupSoALostLinkFailsUnstartedTransfers) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}, /*link_group=*/100).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 10}}, /*link_group=*/100).ok());  // no chunk of it ever arrives
  ASSERT_TRUE(table.Expect(3, {{0, 0, 10}}, /*link_group=*/200).ok());  // another group, unbound
  ASSERT_TRUE(table.Admit(7, Header(1, 0, 0, 0, 5)).ok());
  // Transfer 2 now belongs to link 7: a chunk of it from another link is refused.
  EXPECT_EQ(table.Admit(8, Header(2, 0, 0, 0, 5)).status().code(), absl::StatusCode::kNotFound);
  table.FailLink(7, absl::UnavailableError("peer gone"));
  EXPECT_EQ(table.Receive(1, absl::Seconds(1)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(table.Receive(2, absl::Seconds(1)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(table.Receive(3, absl::Milliseconds(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(TransferTableTest, CancelWakesAWaitingReceiverWithCancelled) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(4, {{0, 0, 10}}).ok());
  absl::Status seen;
  std::thread waiter([&] { seen = table.Receive(4, absl::Seconds(30)).status(); });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_TRUE(table.Cancel(4));
  waiter.join();
  EXPECT_EQ(seen.code(), absl::StatusCode::kCancelled);
}

// Delivers chunk [offset, +length) of stream (page 0, stage 0) of `id`, arriving on link 1.
void Arrive(TransferTable& table, uint64_t id, uint64_t offset, uint32_t length,
            const std::shared_ptr<CreditReturn>& credit = nullptr) {
  ASSERT_TRUE(table.Admit(1, Header(id, 0, 0, offset, length)).ok());
  table.Deliver(Header(id, 0, 0, offset, length), Bytes(length, static_cast<uint8_t>(id)), length, credit);
}

TEST(TransferTableTest, ReceiveAnyReturnsChunksOfSeveralTransfersInArrivalOrder) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 20}}).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 20}}).ok());
  ASSERT_TRUE(table.Expect(3, {{0, 0, 10}}).ok());
  Arrive(table, 2, 0, 10);
  Arrive(table, 1, 10, 10);  // ahead of its gap: arrives (is handed out) only once [0, 10) is there
  Arrive(table, 3, 0, 10);
  Arrive(table, 1, 0, 10);
  Arrive(table, 2, 10, 10);
  const std::vector<std::pair<uint64_t, uint64_t>> expected = {{2, 0}, {3, 0}, {1, 0}, {1, 10}, {2, 10}};
  const std::vector<bool> completes = {false, true, false, true, true};
  for (size_t i = 0; i < expected.size(); ++i) {
    auto event = table.ReceiveAny(absl::Seconds(1));
    ASSERT_TRUE(event.ok()) << event.status();
    ASSERT_TRUE(event->status.ok()) << event->status;
    ASSERT_TRUE(event->chunk.has_value());
    EXPECT_EQ(event->transfer_id, expected[i].first) << i;
    EXPECT_EQ(event->chunk->header().transfer_id, expected[i].first) << i;
    EXPECT_EQ(event->chunk->header().offset, expected[i].second) << i;
    EXPECT_EQ(event->chunk->arrival_sequence(), i);
    EXPECT_EQ(event->chunk->payload()[0], expected[i].first);
    EXPECT_EQ(event->chunk->transfer_complete(), completes[i]) << i;
  }
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.ReceiveAny(absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(TransferTableTest, ReceiveAnyReportsAFailedTransferOnceThenForgetsIt) {
  TransferTable table;
  auto credit = std::make_shared<CountingCredit>();
  ASSERT_TRUE(table.Expect(1, {{0, 0, 20}}).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 20}}).ok());
  Arrive(table, 1, 0, 10, credit);
  Arrive(table, 2, 0, 10, credit);
  table.Fail(1, absl::DataLossError("bad crc"));
  EXPECT_EQ(credit->returned.load(), 10) << "the failed transfer's waiting chunk gives its credit back";
  // The chunk of 1 is gone with its transfer; 2's chunk came before the failure.
  auto chunk = table.ReceiveAny(absl::Seconds(1));
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(chunk->transfer_id, 2u);
  EXPECT_TRUE(chunk->chunk.has_value());
  auto failure = table.ReceiveAny(absl::Seconds(1));
  ASSERT_TRUE(failure.ok()) << failure.status();
  EXPECT_EQ(failure->transfer_id, 1u);
  EXPECT_EQ(failure->status.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(failure->chunk.has_value());
  table.Fail(1, absl::InternalError("failed again after it was reported"));
  EXPECT_EQ(table.ReceiveAny(absl::Milliseconds(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(table.Receive(1, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 1u);
}

TEST(TransferTableTest, ReceiveAnyReportsOutOfRangeAndLinkFailuresWithTheirCodes) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Expect(3, {{0, 0, 10}}).ok());
  EXPECT_EQ(table.Admit(1, Header(1, 0, 0, 5, 10)).status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(table.Admit(7, Header(2, 0, 0, 0, 5)).ok());
  table.FailLink(7, absl::UnavailableError("peer gone"));  // 3 is bound to no link: not failed
  auto first = table.ReceiveAny(absl::Seconds(1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->transfer_id, 1u);
  EXPECT_EQ(first->status.code(), absl::StatusCode::kOutOfRange);
  auto second = table.ReceiveAny(absl::Seconds(1));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->transfer_id, 2u);
  EXPECT_EQ(second->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(table.ReceiveAny(absl::Milliseconds(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(table.size(), 1u);
}

TEST(TransferTableTest, ReceiveAnyTimesOutWithDeadlineExceeded) {
  TransferTable table;
  EXPECT_EQ(table.ReceiveAny(absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(table.Expect(1, {{0, 0, 20}}).ok());
  ASSERT_TRUE(table.Admit(1, Header(1, 0, 0, 10, 10)).ok());
  table.Deliver(Header(1, 0, 0, 10, 10), Bytes(10, 1), 10, nullptr);  // held back by the gap before it
  const absl::Time start = absl::Now();
  EXPECT_EQ(table.ReceiveAny(absl::Milliseconds(50)).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
  EXPECT_EQ(table.size(), 1u);
}

TEST(TransferTableTest, ReceiveAnySkipsChunksAlreadyTakenByReceive) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 20}}).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Expect(3, {{0, 0, 10}}).ok());
  Arrive(table, 1, 0, 10);
  Arrive(table, 2, 0, 10);
  Arrive(table, 1, 10, 10);
  table.Fail(3, absl::DataLossError("bad crc"));
  auto taken = table.Receive(1, absl::Seconds(1));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->header().offset, 0u);
  EXPECT_EQ(table.Receive(3, absl::Seconds(1)).status().code(), absl::StatusCode::kDataLoss);
  std::vector<std::pair<uint64_t, uint64_t>> got;
  while (true) {
    auto event = table.ReceiveAny(absl::Milliseconds(20));
    if (!event.ok()) {
      EXPECT_EQ(event.status().code(), absl::StatusCode::kDeadlineExceeded);
      break;
    }
    ASSERT_TRUE(event->chunk.has_value()) << event->transfer_id << ": " << event->status;
    got.emplace_back(event->transfer_id, event->chunk->header().offset);
  }
  EXPECT_EQ(got, (std::vector<std::pair<uint64_t, uint64_t>>{{2, 0}, {1, 10}}));
  EXPECT_EQ(table.size(), 0u);
}

TEST(TransferTableTest, ReceiveAnyReportsNothingOfACancelledTransfer) {
  TransferTable table;
  auto credit = std::make_shared<CountingCredit>();
  ASSERT_TRUE(table.Expect(1, {{0, 0, 20}}).ok());
  Arrive(table, 1, 0, 10, credit);
  EXPECT_TRUE(table.Cancel(1));
  EXPECT_EQ(credit->returned.load(), 10);
  EXPECT_EQ(table.ReceiveAny(absl::Milliseconds(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(TransferTableTest, ReceiveAnyTellsATransferFromAnEarlierOneWithTheSameId) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  table.Fail(1, absl::DataLossError("bad crc"));
  EXPECT_EQ(table.Receive(1, absl::Seconds(1)).status().code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(table.Expect(2, {{0, 0, 10}}).ok());
  Arrive(table, 2, 0, 10);
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());  // a new transfer reusing the id
  table.Fail(1, absl::UnavailableError("peer gone"));
  // The new failure comes after 2's chunk, where it happened, not where the old one was.
  auto event = table.ReceiveAny(absl::Seconds(1));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->transfer_id, 2u);
  event = table.ReceiveAny(absl::Seconds(1));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->transfer_id, 1u);
  EXPECT_EQ(event->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(table.ReceiveAny(absl::Milliseconds(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  Arrive(table, 1, 0, 10);
  event = table.ReceiveAny(absl::Seconds(1));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(event->status.ok()) << event->status;
  EXPECT_TRUE(event->chunk.has_value());
}

TEST(TransferTableTest, ReceiveAnyWakesWhenAChunkArrivesOnAnotherThread) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Expect(2, {{0, 0, 10}}).ok());
  absl::StatusOr<InboundEvent> seen = absl::UnknownError("not yet");
  absl::Duration waited;
  std::thread consumer([&] {
    const absl::Time start = absl::Now();
    seen = table.ReceiveAny(absl::Seconds(30));
    waited = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(20));
  Arrive(table, 2, 0, 10);
  consumer.join();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->transfer_id, 2u);
  ASSERT_TRUE(seen->chunk.has_value());
  EXPECT_TRUE(seen->chunk->transfer_complete());
  EXPECT_LT(waited, absl::Seconds(10));
}

TEST(TransferTableTest, ReceiveAnyWakesWhenATransferFailsOnAnotherThread) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  absl::StatusOr<InboundEvent> seen = absl::UnknownError("not yet");
  std::thread consumer([&] { seen = table.ReceiveAny(absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(20));
  table.Fail(1, absl::UnavailableError("peer gone"));
  consumer.join();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->transfer_id, 1u);
  EXPECT_EQ(seen->status.code(), absl::StatusCode::kUnavailable);
}

TEST(TransferTableTest, ReceiveWaitingOnATransferThatReceiveAnyDrainsReturnsNotFound) {
  TransferTable table;
  ASSERT_TRUE(table.Expect(1, {{0, 0, 10}}).ok());
  absl::Status seen;
  std::thread waiter([&] { seen = table.Receive(1, absl::Seconds(30)).status(); });
  absl::SleepFor(absl::Milliseconds(20));
  Arrive(table, 1, 0, 10);
  // One of them gets the only chunk; the other learns the transfer is gone rather than waiting it out.
  auto event = table.ReceiveAny(absl::Seconds(2));
  waiter.join();
  if (event.ok()) {
    EXPECT_TRUE(event->chunk.has_value());
    EXPECT_EQ(seen.code(), absl::StatusCode::kNotFound) << seen;
  } else {
    EXPECT_TRUE(seen.ok()) << seen;
    EXPECT_EQ(event.status().code(), absl::StatusCode::kDeadlineExceeded);
  }
}

TEST(TransferTableTest, StaleNewsIsSweptWhenOnlyReceiveIsUsed) {
  TransferTable table;
  // One chunk that nobody takes stays at the head of the news queue; the stale news behind it must not pile up.
  ASSERT_TRUE(table.Expect(999999, {{0, 0, 10}}).ok());
  Arrive(table, 999999, 0, 10);
  for (uint64_t id = 0; id < 10000; ++id) {
    ASSERT_TRUE(table.Expect(id, {{0, 0, 4}}).ok());
    Arrive(table, id, 0, 2);
    if (id % 2 == 0) {
      table.Fail(id, absl::DataLossError("bad crc"));
      ASSERT_EQ(table.Receive(id, absl::ZeroDuration()).status().code(), absl::StatusCode::kDataLoss);
    } else {
      ASSERT_TRUE(table.Receive(id, absl::ZeroDuration()).ok());
      Arrive(table, id, 2, 2);
      ASSERT_TRUE(table.Receive(id, absl::ZeroDuration()).ok());
    }
  }
  EXPECT_EQ(table.size(), 1u);
  EXPECT_LE(table.queued_news(), 128u);
  auto event = table.ReceiveAny(absl::ZeroDuration());
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->transfer_id, 999999u);
  EXPECT_EQ(table.ReceiveAny(absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(table.queued_news(), 0u);
}

TEST(TransferTableTest, ReceiveAnyAndReceiveTogetherHandOutEveryChunkExactlyOnce) {
  constexpr uint64_t kTransfers = 64;
  constexpr uint32_t kChunks = 16;
  TransferTable table;
  auto credit = std::make_shared<CountingCredit>();
  for (uint64_t id = 0; id < kTransfers; ++id) ASSERT_TRUE(table.Expect(id, {{0, 0, kChunks}}).ok());
  std::thread producer([&] {
    for (uint32_t c = 0; c < kChunks; ++c) {
      for (uint64_t id = 0; id < kTransfers; ++id) {
        ASSERT_TRUE(table.Admit(1, Header(id, 0, 0, c, 1)).ok());
        table.Deliver(Header(id, 0, 0, c, 1), Bytes(1, static_cast<uint8_t>(id)), 1, credit);
      }
    }
  });
  // Even transfers are also read by a Receive thread each; every chunk must come out once, to someone.
  std::vector<std::set<uint64_t>> offsets(kTransfers);
  internal::Mutex mu;
  std::atomic<int> bad{0};
  std::atomic<uint64_t> handed_out{0};
  auto record = [&](uint64_t id, const ReceivedChunk& c) {
    internal::MutexLock lock(&mu);
    if (c.header().transfer_id != id || c.payload()[0] != static_cast<uint8_t>(id) ||
        !offsets[id].insert(c.header().offset).second) {
      ++bad;
    }
    ++handed_out;
  };
  std::vector<std::thread> readers;
  for (uint64_t id = 0; id < kTransfers; id += 2) {
    readers.emplace_back([&, id] {
      while (true) {
        auto c = table.Receive(id, absl::Seconds(30));
        if (!c.ok()) return;
        record(id, *c);
        if (c->transfer_complete()) return;
      }
    });
  }
  int completed = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (handed_out.load() < kTransfers * kChunks && absl::Now() < give_up) {
    auto event = table.ReceiveAny(absl::Milliseconds(100));
    if (!event.ok()) {
      EXPECT_EQ(event.status().code(), absl::StatusCode::kDeadlineExceeded) << event.status();
      continue;
    }
    if (!event->chunk.has_value()) {
      ADD_FAILURE() << "transfer " << event->transfer_id << " failed: " << event->status;
      continue;
    }
    record(event->transfer_id, *event->chunk);
    if (event->chunk->transfer_complete()) ++completed;
  }
  producer.join();
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(bad.load(), 0) << "chunks handed out twice or to the wrong transfer";
  size_t total = 0;
  for (const auto& o : offsets) total += o.size();
  EXPECT_EQ(total, kTransfers * kChunks);
  EXPECT_GE(completed, static_cast<int>(kTransfers / 2)) << "odd transfers are read by ReceiveAny alone";
  EXPECT_EQ(credit->returned.load(), kTransfers * kChunks);
  EXPECT_EQ(table.size(), 0u);
}

TEST(TransferTableTest, ExpectRejectsBadAnnouncements) {
  TransferTable table;
  EXPECT_EQ(table.Expect(1, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Expect(1, {{0, 0, 0}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Expect(1, {{0, kMaxStages, 1}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Expect(1, {{0, 0, 1}, {0, 0, 2}}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.Expect(1, {{0, 0, 1}}).ok());
  EXPECT_EQ(table.Expect(1, {{0, 0, 1}}).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace kvt::transport
