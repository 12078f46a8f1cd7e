#include "transport/transfer_table.h"

#include <atomic>
#include <cstring>
#include <thread>

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
  EXPECT_EQ(table.Admit(1, Header(9, 0, 0, 0, 1)).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table.Expect(9, {{0, 0, 10}}).ok());
  ASSERT_TRUE(table.Admit(1, Header(9, 0, 0, 0, 5)).ok());
  EXPECT_EQ(table.Admit(2, Header(9, 0, 0, 5, 5)).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table.Admit(1, Header(9, 0, 0, 5, 5)).ok());  // the other link did not hurt the transfer
}

TEST(TransferTableTest, OutOfBoundsOverlappingAndUnknownStreamChunksFailTheTransferWithOutOfRange) {
  for (const ChunkHeader& bad : {Header(3, 0, 0, 8, 4), Header(3, 1, 0, 0, 4), Header(3, 0, 1, 0, 4),
                                 Header(3, 0, 0, 2, 2), Header(3, 0, 0, 0, 0)}) {
    TransferTable table;
    ASSERT_TRUE(table.Expect(3, {{0, 0, 10}}).ok());
    ASSERT_TRUE(table.Admit(1, Header(3, 0, 0, 0, 4)).ok());
    EXPECT_EQ(table.Admit(1, bad).code(), absl::StatusCode::kOutOfRange);
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
