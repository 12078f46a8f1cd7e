#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace kvt::server {
namespace {

// The value of the sample written exactly as `series` (name plus labels, as the text format prints them),
// or nullopt if `text` has no such line.
std::optional<double> Sample(const std::string& text, absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.size() > series.size() && line.substr(0, series.size()) == series &&
        line[series.size()] == ' ') {
      double value = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
    }
  }
  return std::nullopt;
}

std::unique_ptr<DaemonMetrics> MetricsWithoutHttp() {
  auto metrics = DaemonMetrics::Create(MetricsOptions{});
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return std::move(metrics).value();
}

// A loopback TCP socket, closed on destruction.
class Socket {
 public:
  Socket() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  const int fd_;
};

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// Sends `request` to 127.0.0.1:`port` and returns everything the server writes until it closes.
std::string HttpExchange(int port, const std::string& request) {
  Socket sock;
  EXPECT_GE(sock.fd(), 0);
  sockaddr_in addr = Loopback(port);
  if (connect(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "connect to port " << port << ": " << strerror(errno);
    return "";
  }
  EXPECT_EQ(send(sock.fd(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = recv(sock.fd(), buf, sizeof(buf), 0)) > 0;) response.append(buf, n);
  return response;
}

TEST(DaemonMetricsTest, TransfersAreCountedByRoleOutcomeAndCause) {
  auto metrics = MetricsWithoutHttp();
  metrics->TransferStarted(Side::kPrefill);
  metrics->TransferStarted(Side::kPrefill);
  metrics->TransferStarted(Side::kDecode);
  metrics->TransferFinished(Side::kPrefill, Outcome::kDone, absl::StatusCode::kOk);
  metrics->TransferFinished(Side::kPrefill, Outcome::kFailed, absl::StatusCode::kUnavailable);
  metrics->TransferFinished(Side::kDecode, Outcome::kFailed, absl::StatusCode::kDeadlineExceeded);
  metrics->TransferFinished(Side::kDecode, Outcome::kFailed, absl::StatusCode::kDeadlineExceeded);
  metrics->TransferFinished(Side::kDecode, Outcome::kCancelled, absl::StatusCode::kCancelled);

  const std::string text = metrics->RenderText();
  EXPECT_EQ(Sample(text, "kvt_transfers_started_total{role=\"prefill\"}"), 2) << text;
  EXPECT_EQ(Sample(text, "kvt_transfers_started_total{role=\"decode\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "kvt_transfers_total{cause=\"none\",outcome=\"done\",role=\"prefill\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "kvt_transfers_total{cause=\"UNAVAILABLE\",outcome=\"failed\",role=\"prefill\"}"), 1)
      << text;
  EXPECT_EQ(
      Sample(text, "kvt_transfers_total{cause=\"DEADLINE_EXCEEDED\",outcome=\"failed\",role=\"decode\"}"), 2)
      << text;
  EXPECT_EQ(Sample(text, "kvt_transfers_total{cause=\"none\",outcome=\"cancelled\",role=\"decode\"}"), 1)
      << text;
  EXPECT_NE(text.find("# TYPE kvt_transfers_total counter"), std::string::npos) << text;
}

TEST(DaemonMetricsTest, BytesAreCountedPerLaneAndDirection) {
  auto metrics = MetricsWithoutHttp();
  metrics->BytesSent(Lane::kAnchor, 1000);
  metrics->BytesSent(Lane::kAnchor, 24);
  metrics->BytesSent(Lane::kResidual, 1 << 20);
  metrics->BytesReceived(Lane::kResidual, 7);

  const std::string text = metrics->RenderText();
  EXPECT_EQ(Sample(text, "kvt_bytes_sent_total{lane=\"anchor\"}"), 1024) << text;
  EXPECT_EQ(Sample(text, "kvt_bytes_sent_total{lane=\"residual\"}"), 1 << 20) << text;
  EXPECT_EQ(Sample(text, "kvt_bytes_received_total{lane=\"anchor\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_bytes_received_total{lane=\"residual\"}"), 7) << text;
}

TEST(DaemonMetricsTest, LatencyHistogramsFillTheirBucketsInSeconds) {
  auto metrics = MetricsWithoutHttp();
  metrics->AnchorLatency(absl::Milliseconds(3));
  metrics->AnchorLatency(absl::Seconds(50));
  metrics->FullLatency(absl::Seconds(100));  // past the last bucket: only +Inf

  const std::string text = metrics->RenderText();
  EXPECT_NE(text.find("# TYPE kvt_anchor_latency_seconds histogram"), std::string::npos) << text;
  EXPECT_EQ(Sample(text, "kvt_anchor_latency_seconds_bucket{le=\"0.001\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_anchor_latency_seconds_bucket{le=\"0.002\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_anchor_latency_seconds_bucket{le=\"0.004\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "kvt_anchor_latency_seconds_bucket{le=\"32.768\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "kvt_anchor_latency_seconds_bucket{le=\"65.536\"}"), 2) << text;
  EXPECT_EQ(Sample(text, "kvt_anchor_latency_seconds_bucket{le=\"+Inf\"}"), 2) << text;
  EXPECT_EQ(Sample(text, "kvt_anchor_latency_seconds_count"), 2) << text;
  EXPECT_NEAR(Sample(text, "kvt_anchor_latency_seconds_sum").value_or(-1), 50.003, 1e-9) << text;
  EXPECT_EQ(Sample(text, "kvt_full_latency_seconds_bucket{le=\"65.536\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_full_latency_seconds_bucket{le=\"+Inf\"}"), 1) << text;
}

TEST(DaemonMetricsTest, PageCodecHistogramsResolveMicroseconds) {
  auto metrics = MetricsWithoutHttp();
  metrics->EncodeLatency(absl::Microseconds(3));
  metrics->DecodeLatency(absl::Microseconds(900));

  const std::string text = metrics->RenderText();
  EXPECT_EQ(Sample(text, "kvt_page_encode_seconds_bucket{le=\"2e-06\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_page_encode_seconds_bucket{le=\"4e-06\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "kvt_page_decode_seconds_bucket{le=\"0.000512\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_page_decode_seconds_bucket{le=\"0.001024\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "kvt_page_decode_seconds_count"), 1) << text;
}

TEST(DaemonMetricsTest, GaugesHoldTheLastValueSet) {
  auto metrics = MetricsWithoutHttp();
  metrics->SetInFlight(Side::kDecode, 5);
  metrics->SetInFlight(Side::kDecode, 3);
  metrics->SetQueueDepth("send", 12);
  metrics->SetQueueDepth("decode", 4);
  metrics->SetQueueDepth("send", 0);

  const std::string text = metrics->RenderText();
  EXPECT_EQ(Sample(text, "kvt_in_flight_transfers{role=\"decode\"}"), 3) << text;
  EXPECT_EQ(Sample(text, "kvt_in_flight_transfers{role=\"prefill\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_queue_depth{queue=\"send\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "kvt_queue_depth{queue=\"decode\"}"), 4) << text;
  EXPECT_NE(text.find("# TYPE kvt_queue_depth gauge"), std::string::npos) << text;
}

TEST(DaemonMetricsTest, RejectedChunksAddUpPerCause) {
  auto metrics = MetricsWithoutHttp();
  metrics->ChunksRejected("crc", 2);
  metrics->ChunksRejected("crc", 3);
  metrics->ChunksRejected("unknown_transfer", 1);

  const std::string text = metrics->RenderText();
  EXPECT_EQ(Sample(text, "kvt_chunks_rejected_total{cause=\"crc\"}"), 5) << text;
  EXPECT_EQ(Sample(text, "kvt_chunks_rejected_total{cause=\"unknown_transfer\"}"), 1) << text;
}

TEST(DaemonMetricsTest, ConcurrentUpdatesAreAllCounted) {
  auto metrics = MetricsWithoutHttp();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < kPerThread; ++i) {
        metrics->BytesSent(Lane::kResidual, 1);
        metrics->TransferFinished(Side::kDecode, Outcome::kFailed, absl::StatusCode::kInternal);
        metrics->FullLatency(absl::Milliseconds(1));
      }
    });
  }
  for (auto& thread : threads) thread.join();

  const std::string text = metrics->RenderText();
  EXPECT_EQ(Sample(text, "kvt_bytes_sent_total{lane=\"residual\"}"), kThreads * kPerThread);
  EXPECT_EQ(Sample(text, "kvt_transfers_total{cause=\"INTERNAL\",outcome=\"failed\",role=\"decode\"}"),
            kThreads * kPerThread);
  EXPECT_EQ(Sample(text, "kvt_full_latency_seconds_count"), kThreads * kPerThread);
}

TEST(DaemonMetricsTest, WithoutListenAddressThereIsNoHttpServer) {
  auto metrics = MetricsWithoutHttp();
  EXPECT_EQ(metrics->port(), 0);
}

TEST(DaemonMetricsTest, HttpScrapeServesTheTextFormat) {
  auto metrics = DaemonMetrics::Create(MetricsOptions{"127.0.0.1:0"});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_GT((*metrics)->port(), 0);
  (*metrics)->BytesSent(Lane::kAnchor, 4242);

  const std::string response = HttpExchange((*metrics)->port(), "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(response.substr(0, 12), "HTTP/1.1 200") << response;
  const size_t body = response.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << response;
  EXPECT_EQ(Sample(response.substr(body + 4), "kvt_bytes_sent_total{lane=\"anchor\"}"), 4242) << response;
}

TEST(DaemonMetricsTest, AddressInUseIsUnavailable) {
  Socket taken;
  ASSERT_GE(taken.fd(), 0);
  sockaddr_in addr = Loopback(0);
  ASSERT_EQ(bind(taken.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  ASSERT_EQ(listen(taken.fd(), 1), 0) << strerror(errno);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(taken.fd(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string listen_at = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  auto metrics = DaemonMetrics::Create(MetricsOptions{listen_at});
  EXPECT_EQ(metrics.status().code(), absl::StatusCode::kUnavailable) << metrics.status();
  EXPECT_NE(metrics.status().message().find(listen_at), std::string::npos) << metrics.status();
}

TEST(DaemonMetricsTest, MalformedListenAddressIsInvalidArgument) {
  for (const char* listen : {"9400", ":9400", "localhost:", "localhost:http", "localhost:70000", "host:-1"}) {
    auto metrics = DaemonMetrics::Create(MetricsOptions{listen});
    EXPECT_EQ(metrics.status().code(), absl::StatusCode::kInvalidArgument)
        << listen << ": " << metrics.status();
  }
}

}  // namespace
}  // namespace kvt::server
