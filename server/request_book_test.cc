#include "server/request_book.h"

#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvt::server {
namespace {

std::shared_ptr<RequestRecord> Record(const std::string& id, Side side = Side::kDecode) {
  return std::make_shared<RequestRecord>(id, side, absl::Now());
}

TEST(RequestBookTest, AFinishedRequestLeavesLiveBeforeItsSideRetiresIt) {
  RequestBook book(/*max_live=*/4, /*keep_finished=*/4, absl::Minutes(1));
  auto a = Record("a");
  auto b = Record("b");
  ASSERT_TRUE(book.Add(a).ok());
  ASSERT_TRUE(book.Add(b).ok());
  EXPECT_EQ(book.Live().size(), 2u);

  // The window the daemon's Stats raced with: FAILED is published, Retire has not run yet.
  a->events.Finish(absl::UnavailableError("peer link lost"));
  std::vector<std::shared_ptr<RequestRecord>> live = book.Live();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0]->request_id, "b");
  EXPECT_EQ(book.Find(Side::kDecode, "a"), a) << "a finished request stays findable for Watch replay";

  book.Retire(*a);
  EXPECT_EQ(book.Live().size(), 1u);
  EXPECT_EQ(book.Find(Side::kDecode, "a"), a);
}

TEST(RequestBookTest, IdsAreUniquePerSideAndTheLimitErrorNamesItsFlag) {
  RequestBook book(/*max_live=*/2, /*keep_finished=*/0, absl::Minutes(1));
  ASSERT_TRUE(book.Add(Record("x", Side::kDecode)).ok());
  EXPECT_EQ(book.Add(Record("x", Side::kDecode)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(book.Add(Record("x", Side::kPrefill)).ok()) << "the same id on the other side is another request";
  const absl::Status full = book.Add(Record("y"));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max_requests"), std::string::npos) << full;
}

TEST(RequestBookTest, ARetiredIdCanBeReusedAndReplacesTheFinishedRecord) {
  RequestBook book(/*max_live=*/2, /*keep_finished=*/2, absl::Minutes(1));
  auto first = Record("r");
  ASSERT_TRUE(book.Add(first).ok());
  first->events.Finish(absl::OkStatus());
  book.Retire(*first);
  auto second = Record("r");
  ASSERT_TRUE(book.Add(second).ok());
  EXPECT_EQ(book.Find(Side::kDecode, "r"), second);
  // Retiring the stale record again must not drop the live one of the same id.
  book.Retire(*first);
  EXPECT_EQ(book.Find(Side::kDecode, "r"), second);
  EXPECT_EQ(book.Live().size(), 1u);
}

TEST(RequestBookTest, FinishedRecordsAreKeptUpToTheLimitOldestDroppedFirst) {
  RequestBook book(/*max_live=*/8, /*keep_finished=*/2, absl::Minutes(1));
  for (const char* id : {"1", "2", "3"}) {
    auto r = Record(id);
    ASSERT_TRUE(book.Add(r).ok());
    r->events.Finish(absl::OkStatus());
    book.Retire(*r);
  }
  EXPECT_EQ(book.Find(Side::kDecode, "1"), nullptr);
  EXPECT_NE(book.Find(Side::kDecode, "2"), nullptr);
  EXPECT_NE(book.Find(Side::kDecode, "3"), nullptr);
}

TEST(RequestEventsTest, NothingIsAddedAfterTheTerminalEventAndAWaitEndsAtItsDeadline) {
  RequestEvents events(absl::Now());
  events.Add(EventKind::kAnchorReady, 0);
  EXPECT_TRUE(events.Finish(absl::CancelledError("by the client")));
  EXPECT_FALSE(events.Finish(absl::OkStatus()));
  events.Add(EventKind::kFullReady, 0);
  const std::vector<RequestEvent> all = events.Snapshot();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all.back().kind, EventKind::kFailed);
  EXPECT_EQ(events.outcome().code(), absl::StatusCode::kCancelled);

  bool finished = false;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(50);
  EXPECT_TRUE(events.WaitFrom(2, deadline, &finished).empty());
  EXPECT_TRUE(finished);
  EXPECT_GE(absl::Now(), deadline);
}

TEST(RequestEventsTest, AWaiterWakesWhenAnotherThreadAppends) {
  RequestEvents events(absl::Now());
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    events.Add(EventKind::kAnchorReady, 3);
  });
  bool finished = true;
  const std::vector<RequestEvent> got = events.WaitFrom(0, absl::Now() + absl::Seconds(10), &finished);
  writer.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].layer, 3u);
  EXPECT_FALSE(finished);
}

}  // namespace
}  // namespace kvt::server
