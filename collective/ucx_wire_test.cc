// UcxWire with every rank a thread of this process (its own UCX context and worker), bootstrapped over an
// in-process hub; run once per UCX transport set. The multi-process runs are in ucx_collective_test.cc.
#include "collective/ucx_wire.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "collective/in_process_wire.h"

namespace kvt::collective {
namespace {

struct Transports {
  const char* name;
  UcxWireOptions options;
};

class UcxWireTest : public ::testing::TestWithParam<Transports> {
 protected:
  // Builds a UcxWire per rank (each on its own thread) and runs body(rank, wire) there.
  void RunRanks(int world, const std::function<void(int, CollectiveWire&)>& body) {
    auto hub = std::make_shared<InProcessHub>(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r, bootstrap = hub->Wire(r)]() mutable {
        auto wire = UcxWire::Create(GetParam().options, *bootstrap);
        ASSERT_TRUE(wire.ok()) << wire.status();
        EXPECT_EQ((*wire)->rank(), r);
        EXPECT_EQ((*wire)->world_size(), world);
        body(r, **wire);
        // Keep every wire alive until all ranks are done with theirs.
        ASSERT_TRUE(bootstrap->Send((r + 1) % world, {}, absl::InfiniteFuture()).ok());
        std::vector<uint8_t> none;
        ASSERT_TRUE(
            bootstrap->Receive((r + world - 1) % world, absl::MakeSpan(none), absl::InfiniteFuture()).ok());
      });
    }
    for (std::thread& t : threads) t.join();
  }
};

std::vector<uint8_t> Pattern(int src, int dst, int index, size_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(src * 31 + dst * 7 + index * 13 + i * 5);
  return bytes;
}

TEST_P(UcxWireTest, MessagesOfEverySizeArriveWholeAndInOrderWhenEveryoneSendsFirst) {
  const int world = 3;
  const std::vector<size_t> sizes = {0, 1, 100, 70000, size_t{8} << 20, 3};
  RunRanks(world, [&](int me, CollectiveWire& wire) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (int dst = 0; dst < world; ++dst) {
      if (dst == me) continue;
      for (size_t i = 0; i < sizes.size(); ++i) {
        ASSERT_TRUE(wire.Send(dst, Pattern(me, dst, i, sizes[i]), deadline).ok());
      }
    }
    for (int src = 0; src < world; ++src) {
      if (src == me) continue;
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<uint8_t> got(sizes[i]);
        const absl::Status status = wire.Receive(src, absl::MakeSpan(got), deadline);
        ASSERT_TRUE(status.ok()) << status;
        ASSERT_EQ(got, Pattern(src, me, i, sizes[i])) << "from " << src << " message " << i;
      }
    }
  });
}

TEST_P(UcxWireTest, SizeMismatchIsInvalidArgumentAndConsumesTheMessage) {
  RunRanks(2, [&](int me, CollectiveWire& wire) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    if (me == 0) {
      for (size_t size : {10, 10, 7}) ASSERT_TRUE(wire.Send(1, std::vector<uint8_t>(size, 1), deadline).ok());
      return;
    }
    std::vector<uint8_t> small(5), large(20), right(7);
    EXPECT_EQ(wire.Receive(0, absl::MakeSpan(small), deadline).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(wire.Receive(0, absl::MakeSpan(large), deadline).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(wire.Receive(0, absl::MakeSpan(right), deadline).ok());
  });
}

TEST_P(UcxWireTest, NothingToReceiveIsDeadlineExceededAndALaterMessageStillArrives) {
  RunRanks(2, [&](int me, CollectiveWire& wire) {
    std::vector<uint8_t> one(1);
    if (me == 1) {
      const absl::Time start = absl::Now();
      EXPECT_EQ(wire.Receive(0, absl::MakeSpan(one), start + absl::Milliseconds(200)).code(),
                absl::StatusCode::kDeadlineExceeded);
      EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
      ASSERT_TRUE(wire.Send(0, one, absl::InfiniteFuture()).ok());  // now rank 0 may send
      EXPECT_TRUE(wire.Receive(0, absl::MakeSpan(one), absl::Now() + absl::Seconds(30)).ok());
      EXPECT_EQ(one[0], 42);
    } else {
      ASSERT_TRUE(wire.Receive(1, absl::MakeSpan(one), absl::Now() + absl::Seconds(30)).ok());
      one[0] = 42;
      ASSERT_TRUE(wire.Send(1, one, absl::InfiniteFuture()).ok());
    }
  });
}

TEST_P(UcxWireTest, BadPeersAreInvalidArgument) {
  RunRanks(2, [&](int me, CollectiveWire& wire) {
    std::vector<uint8_t> one(1);
    EXPECT_EQ(wire.Send(me, one, absl::InfiniteFuture()).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(wire.Send(5, one, absl::InfiniteFuture()).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(wire.Receive(-1, absl::MakeSpan(one), absl::InfiniteFuture()).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST(UcxWireOptionsTest, AnUnknownTransportIsRejectedByCreate) {
  auto hub = std::make_shared<InProcessHub>(1);
  auto bootstrap = hub->Wire(0);
  auto wire = UcxWire::Create({.tls = "no_such_transport"}, *bootstrap);
  EXPECT_FALSE(wire.ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxWireTest,
                         ::testing::Values(Transports{"Tcp", {.tls = "tcp", .net_devices = "lo"}},
                                           Transports{"SharedMemory",
                                                      {.tls = "posix,tcp", .net_devices = "lo"}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvt::collective
