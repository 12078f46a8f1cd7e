// StreamGate (stream_gate.h): work behind a closed gate waits for Open, a gate nobody opens gives up at its
// deadline and says so, a destroyed gate releases its stream, and a stretch timed behind a gate holds none of the
// host's time. Part of codec_cuda_test; every test skips (GTEST_SKIP) when no CUDA device is present.
#include "common/stream_gate.h"

#include <chrono>
#include <thread>
#include <vector>

#include "codec/gpu/codec_cuda_test_util.h"
#include "common/cuda_util.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu {
namespace {

struct Gated {
  std::unique_ptr<OwnedCudaStream> owned;
  CudaStream stream;
  std::unique_ptr<StreamGate> gate;
};

Gated MakeGated() {
  Gated g;
  g.owned = OwnedCudaStream::Create().value();
  g.stream = g.owned->get();
  g.gate = StreamGate::Create().value();
  return g;
}

// The buffer's bytes, copied on `stream` (the legacy one by default) once the work before it there is done.
std::vector<uint8_t> DeviceBytes(const DeviceBuffer& buf, CudaStream stream = {}) {
  std::vector<uint8_t> host(buf.size());
  EXPECT_TRUE(CopyToHost(host.data(), buf.get(), buf.size(), stream).ok());
  EXPECT_TRUE(Synchronize(stream).ok());
  return host;
}

TEST(StreamGate, HoldsTheStreamsWorkUntilOpened) {
  SKIP_WITHOUT_CUDA();
  Gated g = MakeGated();
  auto buf = DeviceBuffer::Create(4096).value();
  ASSERT_TRUE(FillDevice(buf->get(), 0, 4096, g.stream).ok());
  ASSERT_TRUE(Synchronize(g.stream).ok());
  ASSERT_TRUE(g.gate->Close(g.stream).ok());
  ASSERT_TRUE(FillDevice(buf->get(), 0xAB, 4096, g.stream).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(StreamIdle(g.stream).value()) << "the fill ran before the gate opened";
  // Read on the legacy stream, which the gate (on a non-blocking stream) does not hold.
  EXPECT_EQ(DeviceBytes(*buf), std::vector<uint8_t>(4096, 0));
  g.gate->Open();
  ASSERT_TRUE(Synchronize(g.stream).ok());
  EXPECT_TRUE(g.gate->Passed().ok()) << g.gate->Passed();
  EXPECT_EQ(DeviceBytes(*buf, g.stream), std::vector<uint8_t>(4096, 0xAB));
}

TEST(StreamGate, AGateNobodyOpensGivesUpAtItsDeadlineAndSaysSo) {
  SKIP_WITHOUT_CUDA();
  Gated g = MakeGated();
  EXPECT_EQ(g.gate->Passed().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(g.gate->Close(g.stream, /*timeout_ms=*/5).ok());
  ASSERT_TRUE(Synchronize(g.stream).ok());  // returns without Open
  EXPECT_EQ(g.gate->Passed().code(), absl::StatusCode::kDeadlineExceeded);
  // Opened late, it closes again, and this time passes.
  g.gate->Open();
  ASSERT_TRUE(g.gate->Close(g.stream).ok());
  g.gate->Open();
  ASSERT_TRUE(Synchronize(g.stream).ok());
  EXPECT_TRUE(g.gate->Passed().ok()) << g.gate->Passed();
}

TEST(StreamGate, RejectsASecondCloseAndABadTimeout) {
  SKIP_WITHOUT_CUDA();
  Gated g = MakeGated();
  EXPECT_EQ(g.gate->Close(g.stream, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.gate->Close(g.stream, -1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(g.gate->Close(g.stream).ok());
  EXPECT_EQ(g.gate->Close(g.stream).code(), absl::StatusCode::kFailedPrecondition);
  g.gate->Open();
  g.gate->Open();  // nothing to open
  ASSERT_TRUE(Synchronize(g.stream).ok());
  EXPECT_TRUE(g.gate->Passed().ok());
}

TEST(StreamGate, DestroyingAClosedGateReleasesItsStream) {
  SKIP_WITHOUT_CUDA();
  Gated g = MakeGated();
  auto buf = DeviceBuffer::Create(4096).value();
  ASSERT_TRUE(g.gate->Close(g.stream, /*timeout_ms=*/60000).ok());
  ASSERT_TRUE(FillDevice(buf->get(), 0x5A, 4096, g.stream).ok());
  const auto start = std::chrono::steady_clock::now();
  g.gate.reset();  // opens, and waits for the kernel before freeing what it polls
  ASSERT_TRUE(Synchronize(g.stream).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "waited out the deadline";
  EXPECT_EQ(DeviceBytes(*buf, g.stream), std::vector<uint8_t>(4096, 0x5A));
}

// The point of the gate: host time between the events is not timed. Without it, a 30 ms host pause between the
// start event and the work is all timed.
TEST(StreamGate, ATimedStretchBehindAGateHoldsNoneOfTheHostsTime) {
  SKIP_WITHOUT_CUDA();
  Gated g = MakeGated();
  auto timer = CudaEventTimer::Create().value();
  auto buf = DeviceBuffer::Create(1 << 20).value();
  const auto pause = std::chrono::milliseconds(30);

  ASSERT_TRUE(timer->Start(g.stream).ok());
  std::this_thread::sleep_for(pause);
  ASSERT_TRUE(FillDevice(buf->get(), 1, 1 << 20, g.stream).ok());
  ASSERT_TRUE(timer->Stop(g.stream).ok());
  const float idle_ms = timer->ElapsedMs().value();
  EXPECT_GE(idle_ms, 29.0f);

  ASSERT_TRUE(g.gate->Close(g.stream).ok());
  ASSERT_TRUE(timer->Start(g.stream).ok());
  std::this_thread::sleep_for(pause);
  ASSERT_TRUE(FillDevice(buf->get(), 2, 1 << 20, g.stream).ok());
  ASSERT_TRUE(timer->Stop(g.stream).ok());
  g.gate->Open();
  const float gated_ms = timer->ElapsedMs().value();
  ASSERT_TRUE(g.gate->Passed().ok()) << g.gate->Passed();
  EXPECT_LT(gated_ms, 10.0f) << "the host's pause was timed";
}

}  // namespace
}  // namespace kvt::codec::gpu
