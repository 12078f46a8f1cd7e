#include "collective/tcp_wire.h"

#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "collective/multi_process_testing.h"

namespace kvt::collective {
namespace {

// Builds a mesh of `world` TcpWires in this process, one thread per rank, on listeners bound to port 0.
std::vector<std::unique_ptr<TcpWire>> Mesh(int world) {
  std::vector<std::unique_ptr<TcpWire>> wires(world);
  absl::StatusOr<LoopbackListeners> loopback = ListenOnLoopback(world);
  EXPECT_TRUE(loopback.ok()) << loopback.status();
  if (!loopback.ok()) return wires;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto wire =
          TcpWire::Create({.rank = r, .peers = loopback->peers, .bootstrap_timeout = absl::Seconds(10)},
                          std::move(loopback->listeners[r]));
      EXPECT_TRUE(wire.ok()) << wire.status();
      if (wire.ok()) wires[r] = std::move(*wire);
    });
  }
  for (std::thread& t : threads) t.join();
  return wires;
}

TEST(ParsePeerListTest, SplitsHostPortEntries) {
  auto peers = ParsePeerList("10.0.0.1:7000,node-b:7001,[::1]:7002");
  ASSERT_TRUE(peers.ok()) << peers.status();
  EXPECT_EQ(*peers, (std::vector<std::string>{"10.0.0.1:7000", "node-b:7001", "[::1]:7002"}));
}

TEST(ParsePeerListTest, EntriesWithoutAPortAreRejected) {
  EXPECT_EQ(ParsePeerList("10.0.0.1:7000,node-b").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePeerList("a:70000").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePeerList(":7000").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePeerList("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TcpWireTest, MessagesArriveWholeAndInOrderBetweenEveryPair) {
  auto wires = Mesh(3);
  for (const auto& w : wires) ASSERT_NE(w, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  // Large enough that a send would block on a full socket if nobody drained it.
  const size_t big = 8 << 20;
  for (int src = 0; src < 3; ++src) {
    for (int dst = 0; dst < 3; ++dst) {
      if (src == dst) continue;
      std::vector<uint8_t> first(big, static_cast<uint8_t>(src * 3 + dst));
      ASSERT_TRUE(wires[src]->Send(dst, first, deadline).ok());
      ASSERT_TRUE(wires[src]->Send(dst, {}, deadline).ok());
      const uint8_t last[] = {static_cast<uint8_t>(dst), static_cast<uint8_t>(src)};
      ASSERT_TRUE(wires[src]->Send(dst, last, deadline).ok());
    }
  }
  for (int dst = 0; dst < 3; ++dst) {
    for (int src = 0; src < 3; ++src) {
      if (src == dst) continue;
      std::vector<uint8_t> first(big);
      ASSERT_TRUE(wires[dst]->Receive(src, absl::MakeSpan(first), deadline).ok());
      EXPECT_EQ(first, std::vector<uint8_t>(big, static_cast<uint8_t>(src * 3 + dst)));
      ASSERT_TRUE(wires[dst]->Receive(src, {}, deadline).ok());
      uint8_t last[2];
      ASSERT_TRUE(wires[dst]->Receive(src, absl::MakeSpan(last), deadline).ok());
      EXPECT_EQ(last[0], dst);
      EXPECT_EQ(last[1], src);
    }
  }
}

TEST(TcpWireTest, MessageOfTheWrongSizeIsInvalidArgument) {
  auto wires = Mesh(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const uint8_t three[] = {1, 2, 3};
  ASSERT_TRUE(wires[0]->Send(1, three, deadline).ok());
  uint8_t four[4];
  EXPECT_EQ(wires[1]->Receive(0, absl::MakeSpan(four), deadline).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TcpWireTest, NothingToReceiveIsDeadlineExceeded) {
  auto wires = Mesh(2);
  uint8_t one[1];
  const absl::Time start = absl::Now();
  EXPECT_EQ(wires[0]->Receive(1, absl::MakeSpan(one), start + absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(TcpWireTest, PeerThatGoesAwayIsUnavailableAfterItsQueuedMessages) {
  auto wires = Mesh(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const uint8_t two[] = {7, 8};
  ASSERT_TRUE(wires[1]->Send(0, two, deadline).ok());
  wires[1].reset();
  uint8_t got[2];
  EXPECT_TRUE(wires[0]->Receive(1, absl::MakeSpan(got), deadline).ok());
  EXPECT_EQ(wires[0]->Receive(1, absl::MakeSpan(got), deadline).code(), absl::StatusCode::kUnavailable);
  // Sending into the closed connection fails too, at the latest once the kernel has seen the reset.
  absl::Status send;
  std::vector<uint8_t> block(1 << 20);
  for (int i = 0; i < 100 && send.ok(); ++i) send = wires[0]->Send(1, block, deadline);
  EXPECT_EQ(send.code(), absl::StatusCode::kUnavailable) << send;
}

TEST(TcpWireTest, BootstrapWithoutPeersIsDeadlineExceeded) {
  auto listener = TcpListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  auto absent = TcpListener::Listen("127.0.0.1:0");  // bound but never accepting as rank 1... rank 0 waits
  ASSERT_TRUE(absent.ok());
  const std::vector<std::string> peers = {absl::StrFormat("127.0.0.1:%d", listener->port()),
                                          absl::StrFormat("127.0.0.1:%d", absent->port())};
  auto wire = TcpWire::Create({.rank = 0, .peers = peers, .bootstrap_timeout = absl::Milliseconds(200)},
                              std::move(*listener));
  EXPECT_EQ(wire.status().code(), absl::StatusCode::kDeadlineExceeded) << wire.status();
}

TEST(TcpWireTest, RankOutsideThePeerListIsInvalidArgument) {
  EXPECT_EQ(TcpWire::Create({.rank = 2, .peers = {"127.0.0.1:1", "127.0.0.1:2"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::collective
