// One end of the network-emulation test (netem_test.cc), run by it inside a network namespace.
//   --role=receiver: prints "ADDRESS <ucx address>", receives transfer 1 (residual) and 2 (anchor), checks every
//                    byte, prints "RESULT <json>", then waits for stdin to close before tearing the link down.
//   --role=sender:   connects to --peer, queues the residual transfer, then the anchor transfer at once, waits
//                    for both, prints "RESULT <json>".
// Payloads are the same pseudo-random bytes on both sides (seeded by stage), so the receiver can check them.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

ABSL_FLAG(std::string, role, "", "receiver or sender");
ABSL_FLAG(std::string, peer, "", "sender: the receiver's address");
ABSL_FLAG(std::string, net_devices, "", "UCX_NET_DEVICES (the veth end in this namespace)");
ABSL_FLAG(int, anchor_kib, 4096, "anchor stream size");
ABSL_FLAG(int, residual_kib, 12288, "residual stream size");
ABSL_FLAG(int, chunk_kib, 256, "kvt chunk size");
ABSL_FLAG(double, rate_mbit, 0, "kvt's token bucket, Mbit/s (0 = unlimited)");
ABSL_FLAG(int, window_kib, 8192, "kvt's bytes in flight / receive buffer per link");

namespace kvt::transport {
namespace {

constexpr uint64_t kResidualId = 1, kAnchorId = 2;

std::vector<uint8_t> Pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ (seed * 0xBF58476D1CE4E5B9ull);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x >> 32);
  }
  return v;
}

Options MakeOptions() {
  Options o;
  o.ucx_tls = "tcp";
  o.ucx_net_devices = absl::GetFlag(FLAGS_net_devices);
  o.chunk_bytes = static_cast<uint32_t>(absl::GetFlag(FLAGS_chunk_kib)) << 10;
  o.max_inflight_bytes = o.max_receive_buffer_bytes = int64_t{absl::GetFlag(FLAGS_window_kib)} << 10;
  o.rate_bytes_per_second = absl::GetFlag(FLAGS_rate_mbit) * 1e6 / 8;
  o.peer_timeout = absl::Seconds(10);
  return o;
}

int Receiver() {
  const auto anchor = Pattern(size_t{static_cast<size_t>(absl::GetFlag(FLAGS_anchor_kib))} << 10, 0);
  const auto residual = Pattern(size_t{static_cast<size_t>(absl::GetFlag(FLAGS_residual_kib))} << 10, 1);
  auto t = NewUcxTransport(MakeOptions());
  if (!t.ok()) {
    std::printf("ERROR %s\n", t.status().ToString().c_str());
    return 1;
  }
  if (!(*t)->Expect(kResidualId, {{0, 1, residual.size()}}).ok() ||
      !(*t)->Expect(kAnchorId, {{0, 0, anchor.size()}}).ok()) {
    return 1;
  }
  std::printf("ADDRESS %s\n", (*t)->address().c_str());
  std::fflush(stdout);
  struct Outcome {
    bool intact = true;
    absl::Status status;
    absl::Time first, done;
  };
  Outcome outcomes[2];
  auto drain = [&](uint64_t id, const std::vector<uint8_t>& expected, Outcome* out) {
    bool first = true;
    while (true) {
      auto c = (*t)->Receive(id, absl::Seconds(60));
      if (!c.ok()) {
        out->status = c.status();
        return;
      }
      if (first) out->first = absl::Now();
      first = false;
      const ChunkHeader& h = c->header();
      if (h.offset + h.length > expected.size() ||
          std::memcmp(c->payload().data(), expected.data() + h.offset, h.length) != 0) {
        out->intact = false;
      }
      if (c->transfer_complete()) {
        out->done = absl::Now();
        return;
      }
    }
  };
  std::thread r(drain, kResidualId, std::cref(residual), &outcomes[0]);
  std::thread a(drain, kAnchorId, std::cref(anchor), &outcomes[1]);
  r.join();
  a.join();
  const TransportStats s = (*t)->stats();
  std::printf(
      "RESULT {\"residual_ok\": %s, \"anchor_ok\": %s, \"residual_intact\": %s, \"anchor_intact\": %s, "
      "\"anchor_done_before_residual\": %s, \"anchor_minus_residual_first_s\": %.6f, \"rejected\": %d}\n",
      outcomes[0].status.ok() ? "true" : "false", outcomes[1].status.ok() ? "true" : "false",
      outcomes[0].intact ? "true" : "false", outcomes[1].intact ? "true" : "false",
      outcomes[1].done < outcomes[0].done ? "true" : "false",
      absl::ToDoubleSeconds(outcomes[1].done - outcomes[0].first),
      static_cast<int>(s.rejected_bad_crc + s.rejected_malformed + s.rejected_out_of_bounds +
                       s.rejected_unknown_transfer + s.rejected_over_window));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int Sender() {
  const auto anchor = Pattern(size_t{static_cast<size_t>(absl::GetFlag(FLAGS_anchor_kib))} << 10, 0);
  const auto residual = Pattern(size_t{static_cast<size_t>(absl::GetFlag(FLAGS_residual_kib))} << 10, 1);
  auto t = NewUcxTransport(MakeOptions());
  if (!t.ok()) {
    std::printf("ERROR %s\n", t.status().ToString().c_str());
    return 1;
  }
  auto peer = (*t)->Connect(absl::GetFlag(FLAGS_peer), absl::Seconds(20));
  if (!peer.ok()) {
    std::printf("ERROR %s\n", peer.status().ToString().c_str());
    return 1;
  }
  const absl::Time start = absl::Now();
  auto r = (*t)->Send(*peer, kResidualId, {{0, 1, residual}});
  const absl::Time anchor_start = absl::Now();
  auto a = (*t)->Send(*peer, kAnchorId, {{0, 0, anchor}});
  if (!r.ok() || !a.ok()) {
    std::printf("ERROR send refused\n");
    return 1;
  }
  const absl::Status as = (*a)->Wait();
  const absl::Time anchor_done = absl::Now();
  const absl::Status rs = (*r)->Wait();
  const absl::Time done = absl::Now();
  std::printf(
      "RESULT {\"anchor_status\": \"%s\", \"residual_status\": \"%s\", \"anchor_seconds\": %.6f, "
      "\"total_seconds\": %.6f, \"bytes\": %d}\n",
      std::string(absl::StatusCodeToString(as.code())).c_str(),
      std::string(absl::StatusCodeToString(rs.code())).c_str(), absl::ToDoubleSeconds(anchor_done - anchor_start),
      absl::ToDoubleSeconds(done - start), static_cast<int>(anchor.size() + residual.size()));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace kvt::transport

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "receiver") return kvt::transport::Receiver();
  if (role == "sender") return kvt::transport::Sender();
  std::fprintf(stderr, "--role must be receiver or sender\n");
  return 2;
}
