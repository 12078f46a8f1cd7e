// kvtd as real processes, each started by DaemonProcess: what only a separate process can show. A daemon that
// crashes (SIGKILL) mid-transfer, mutual TLS and the shared token between daemons, the client socket's
// permissions and ownership, and /metrics over HTTP. Sockets live in a short directory under /tmp (a unix
// socket path must stay under 108 bytes, and TEST_TMPDIR is often longer).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon_pair.h"
#include "tests/testutil/certificates.h"
#include "tools/kvtctl/daemon_process.h"

namespace kvt::e2e {
namespace {

using ::kvt::kvtctl::DaemonProcess;
using ::testing::HasSubstr;

constexpr absl::Duration kStartTimeout = absl::Seconds(20);
// The data plane's peer_timeout is 3 s; a dead peer must fail its transfers well within this.
constexpr absl::Duration kFailureBound = absl::Seconds(10);
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kHeads = 4;
constexpr uint32_t kHeadDim = 64;

// The kvtd binary from this test's runfiles (data = ["//server:kvtd"]).
std::string KvtdPath() {
  if (const char* srcdir = std::getenv("TEST_SRCDIR"); srcdir != nullptr) {
    const std::string path = absl::StrCat(srcdir, "/kvt/server/kvtd");
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  absl::StatusOr<std::string> found = kvtctl::FindKvtd("");
  return found.ok() ? *found : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// GET `path` from 127.0.0.1:`port` over HTTP/1.0; the whole response (headers and body), or an error.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket");
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to 127.0.0.1:", port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send");
  }
  std::string response;
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat("recv after ", response.size(), " bytes"));
    }
    if (n == 0) break;
    response.append(buffer, n);
  }
  close(fd);
  return response;
}

// Sum of the samples of `name` whose label set contains every one of `labels` (e.g. `outcome="done"`); -1 if
// there is none.
double SampleSum(const std::string& exposition, const std::string& name,
                 const std::vector<std::string>& labels) {
  double sum = -1;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::StartsWith(line, absl::StrCat(name, "{")) &&
        !absl::StartsWith(line, absl::StrCat(name, " "))) {
      continue;
    }
    bool match = true;
    for (const std::string& l : labels) match = match && absl::StrContains(line, l);
    double value = 0;
    if (!match || !absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) continue;
    sum = (sum < 0 ? 0 : sum) + value;
  }
  return sum;
}

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kvtd_ = KvtdPath();
    ASSERT_FALSE(kvtd_.empty()) << "kvtd not found in the runfiles (data = [\"//server:kvtd\"])";
    char dir[] = "/tmp/kvtp-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }

  void TearDown() override {
    clients_.clear();
    daemons_.clear();  // SIGTERM, then reaped
    if (dir_.empty()) return;
    std::error_code ignored;
    if (HasFailure()) {
      for (const auto& entry : std::filesystem::directory_iterator(dir_, ignored)) {
        if (entry.path().extension() != ".log") continue;
        const std::string log = ReadFile(entry.path().string());
        std::cerr << "---- " << entry.path().filename().string() << " (last 4000 bytes) ----\n"
                  << log.substr(log.size() > 4000 ? log.size() - 4000 : 0) << "\n";
      }
    }
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string SocketPath(const std::string& name) const { return absl::StrCat(dir_, "/", name, ".sock"); }

  // Flags every daemon here gets: its role and name, a socket in dir_, kernel-picked ports on loopback.
  std::vector<std::string> BaseFlags(const std::string& role, const std::string& name) const {
    return {absl::StrCat("--role=", role),
            absl::StrCat("--daemon_id=", name),
            absl::StrCat("--client_socket=", SocketPath(name)),
            "--peer_listen=127.0.0.1:0",
            "--metrics_listen=127.0.0.1:0",
            "--ucx_net_devices=lo",
            "--codec_threads=1"};
  }

  absl::StatusOr<std::unique_ptr<DaemonProcess>> TryLaunch(const std::string& role, const std::string& name,
                                                           const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = BaseFlags(role, name);
    flags.insert(flags.end(), extra.begin(), extra.end());
    return DaemonProcess::Launch(kvtd_, name, flags, dir_, kStartTimeout);
  }

  // Starts a daemon this fixture owns (stopped at TearDown) and connects a client to it.
  DaemonProcess* Launch(const std::string& role, const std::string& name,
                        const std::vector<std::string>& extra = {}) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> process = TryLaunch(role, name, extra);
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return nullptr;
    ClientOptions options;
    options.socket = (*process)->client_socket();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return nullptr;
    clients_[name] = *std::move(client);
    daemons_.push_back(*std::move(process));
    return daemons_.back().get();
  }

  Client& ClientOf(const std::string& name) { return *clients_.at(name); }

  // A filled source cache registered as "src" on `prefill` and an empty one registered as "dst" on `decode`.
  void MakeRegions(const std::string& prefill, const std::string& decode, uint32_t layers, uint32_t blocks) {
    const kv::KvLayoutSpec layout = DenseLayout(layers, blocks, kBlockTokens, kHeads, kHeadDim);
    absl::StatusOr<KvCache> src = MakeKvCache(layout, 11, true);
    ASSERT_TRUE(src.ok()) << src.status();
    src_ = *std::move(src);
    absl::StatusOr<KvCache> dst = MakeKvCache(layout, 0, false);
    ASSERT_TRUE(dst.ok()) << dst.status();
    dst_ = *std::move(dst);
    ASSERT_TRUE(RegisterSource(prefill).ok());
    const absl::Status s =
        ClientOf(decode).RegisterRegion("dst", dst_.proto(), dst_.memory->name(), dst_.memory->size());
    ASSERT_TRUE(s.ok()) << s;
  }

  absl::Status RegisterSource(const std::string& prefill) {
    return ClientOf(prefill).RegisterRegion("src", src_.proto(), src_.memory->name(), src_.memory->size());
  }

  std::vector<uint32_t> AllBlocks() const {
    std::vector<uint32_t> ids(src_.spec.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }

  uint64_t AllTokens() const { return uint64_t{src_.spec.num_blocks} * kBlockTokens; }

  absl::Status Expect(const std::string& decode, const std::string& id) {
    ExpectSpec e;
    e.request_id = id;
    e.region_id = "dst";
    e.block_ids = AllBlocks();
    e.num_tokens = AllTokens();
    e.deadline = absl::Seconds(60);
    return ClientOf(decode).Expect(e);
  }

  // Offers layers [0, ready_layers) (all by default) of the whole source region.
  absl::Status Offer(const std::string& prefill, const std::string& id, const std::string& decode_address,
                     const std::string& scheme = "int8", uint32_t ready_layers = ~0u) {
    OfferSpec o;
    o.request_id = id;
    o.region_id = "src";
    o.block_ids = AllBlocks();
    o.num_tokens = AllTokens();
    o.scheme = scheme;
    o.decode_daemon = decode_address;
    o.deadline = absl::Seconds(60);
    for (uint32_t l = 0; l < std::min(ready_layers, src_.spec.num_layers); ++l) o.ready_layers.push_back(l);
    return ClientOf(prefill).Offer(o);
  }

  absl::Status Watch(const std::string& daemon, const std::string& id, v1::Side side,
                     std::vector<v1::TransferEvent>* events = nullptr,
                     absl::Duration timeout = absl::Seconds(30)) {
    return ClientOf(daemon).Watch(
        id,
        [events](const v1::TransferEvent& e) {
          if (events != nullptr) events->push_back(e);
        },
        timeout, side);
  }

  // Whether the decode region holds exactly what the codec decodes from the source (a full transfer).
  bool DecodeRegionIsExact(const std::string& scheme) {
    const std::vector<uint8_t> zeros(dst_.memory->size(), 0);
    absl::StatusOr<std::vector<uint8_t>> expected =
        ExpectedAfterTransfer(src_, AllBlocks(), dst_.spec, AllBlocks(), AllTokens(), scheme, zeros);
    EXPECT_TRUE(expected.ok()) << expected.status();
    return expected.ok() && std::equal(expected->begin(), expected->end(), dst_.memory->data());
  }

  // Retries UnregisterRegion for up to `bound` (a decode task still running may hold the region a moment
  // after the request finished); the last status.
  absl::Status UnregisterWithin(const std::string& daemon, const std::string& region, absl::Duration bound) {
    const absl::Time until = absl::Now() + bound;
    while (true) {
      absl::Status s = ClientOf(daemon).UnregisterRegion(region);
      if (s.ok() || s.code() != absl::StatusCode::kFailedPrecondition || absl::Now() >= until) return s;
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  std::string kvtd_;
  std::string dir_;
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
  std::map<std::string, std::unique_ptr<Client>> clients_;
  KvCache src_;
  KvCache dst_;
};

// Rate limit (prefill side) and chunking that keep the crash tests' transfer on the wire for seconds: 8
// layers of int8 K and V for 1280 tokens x 256 channels is ~5.3 MB, ~0.5 s per layer and ~4 s in all at 0.01
// Gbit/s.
std::vector<std::string> SlowSender() { return {"--rate_gbps=0.01", "--chunk_kib=16"}; }
std::vector<std::string> SmallChunks() { return {"--chunk_kib=16"}; }
constexpr uint32_t kSlowLayers = 8;
constexpr uint32_t kSlowBlocks = 80;

class PrefillCrashTest : public ProcessTest {
 protected:
  // Starts a slow prefill daemon "p" and a decode daemon "d", offers `ready_layers` of request "crash" and
  // waits until layer 0 is in the decode region.
  void StartTransfer(uint32_t ready_layers) {
    prefill_ = Launch("prefill", "p", SlowSender());
    decode_ = Launch("decode", "d", SmallChunks());
    ASSERT_TRUE(prefill_ != nullptr && decode_ != nullptr);
    MakeRegions("p", "d", kSlowLayers, kSlowBlocks);
    ASSERT_TRUE(Expect("d", "crash").ok());
    ASSERT_TRUE(Offer("p", "crash", decode_->peer_address(), "int8", ready_layers).ok());
    const absl::Status first = ClientOf("d").WaitForLayer("crash", 0, Precision::kFull, absl::Seconds(10));
    ASSERT_TRUE(first.ok()) << first;
  }

  // Kills the prefill daemon; the decode side's request must fail with UNAVAILABLE within kFailureBound, and
  // leave nothing pinned or in flight.
  void KillPrefillAndExpectUnavailable() {
    prefill_->Kill();
    const absl::Time killed = absl::Now();
    std::vector<v1::TransferEvent> events;
    const absl::Status s = Watch("d", "crash", v1::SIDE_DECODE, &events, kFailureBound + absl::Seconds(5));
    const absl::Duration took = absl::Now() - killed;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_LT(took, kFailureBound) << "the decode side took " << took << " to see its peer die";
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().kind(), v1::TransferEvent::FAILED);
    int full_layers = 0;
    for (const auto& e : events) full_layers += e.kind() == v1::TransferEvent::FULL_READY;
    EXPECT_LT(full_layers, static_cast<int>(kSlowLayers))
        << "the transfer finished before the kill; slow it down";

    const absl::Status unregistered = UnregisterWithin("d", "dst", absl::Seconds(2));
    EXPECT_TRUE(unregistered.ok()) << unregistered;
    absl::StatusOr<v1::StatsResponse> stats = ClientOf("d").Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->in_flight(), 0u);
  }

  DaemonProcess* prefill_ = nullptr;
  DaemonProcess* decode_ = nullptr;
};

TEST_F(PrefillCrashTest, PrefillDaemonKilledWhileSendingALayerFailsTheDecodeRequestWithUnavailable) {
  StartTransfer(kSlowLayers);
  // Layer 1 follows layer 0 on the wire at once and takes ~0.5 s: kill in its middle, chunks in flight.
  absl::SleepFor(absl::Milliseconds(150));
  KillPrefillAndExpectUnavailable();
}

TEST_F(PrefillCrashTest, PrefillDaemonKilledBetweenLayersFailsTheDecodeRequestWithUnavailable) {
  // The engine offered layer 0 only and is "computing" the rest when its daemon dies: no chunk is in flight.
  StartTransfer(/*ready_layers=*/1);
  KillPrefillAndExpectUnavailable();
}

TEST_F(PrefillCrashTest, PrefillDaemonKilledBeforeItsFirstChunkFailsTheDecodeRequestWithUnavailable) {
  // The transfer is open (OpenTransfer rendezvous done) but no layer is ready yet, so no data-plane link carries
  // it: the decode side must notice the dead prefill daemon on the control plane, long before the deadline.
  prefill_ = Launch("prefill", "p", SlowSender());
  decode_ = Launch("decode", "d", SmallChunks());
  ASSERT_TRUE(prefill_ != nullptr && decode_ != nullptr);
  MakeRegions("p", "d", kSlowLayers, kSlowBlocks);
  ASSERT_TRUE(Expect("d", "crash").ok());
  ASSERT_TRUE(Offer("p", "crash", decode_->peer_address(), "int8", /*ready_layers=*/0).ok());
  absl::SleepFor(absl::Milliseconds(500));  // the rendezvous happens meanwhile
  KillPrefillAndExpectUnavailable();
}

TEST_F(ProcessTest, DecodeDaemonKilledMidTransferFailsThePrefillRequestWithUnavailable) {
  DaemonProcess* prefill = Launch("prefill", "p", SlowSender());
  DaemonProcess* decode = Launch("decode", "d", SmallChunks());
  ASSERT_TRUE(prefill != nullptr && decode != nullptr);
  MakeRegions("p", "d", kSlowLayers, kSlowBlocks);
  ASSERT_TRUE(Expect("d", "crash").ok());
  ASSERT_TRUE(Offer("p", "crash", decode->peer_address()).ok());
  const absl::Status first = ClientOf("d").WaitForLayer("crash", 0, Precision::kFull, absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first;

  decode->Kill();
  const absl::Time killed = absl::Now();
  // The prefill side waits on its layers' send handles; a lost link fails them with UNAVAILABLE (the data
  // plane's peer_timeout, 3 s, is shorter than its stall_timeout, 10 s, which would give DEADLINE_EXCEEDED).
  std::vector<v1::TransferEvent> events;
  const absl::Status s = Watch("p", "crash", v1::SIDE_PREFILL, &events, absl::Seconds(20));
  const absl::Duration took = absl::Now() - killed;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(took, kFailureBound) << "the prefill side took " << took << " to see its peer die";
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind(), v1::TransferEvent::FAILED);

  // The source region is free again, and the prefill daemon serves new requests.
  const absl::Status unregistered = UnregisterWithin("p", "src", absl::Seconds(2));
  EXPECT_TRUE(unregistered.ok()) << unregistered;
  absl::StatusOr<v1::StatsResponse> stats = ClientOf("p").Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->in_flight(), 0u);
}

TEST_F(ProcessTest, MutualTlsDaemonsTransferAndAPlaintextPrefillCannotConnect) {
  if (!testutil::HaveOpenssl()) {
    GTEST_SKIP() << "the openssl command-line tool is not installed; it makes this test's certificates";
  }
  ASSERT_TRUE(testutil::MakeCertificates(dir_, {"d", "p"})) << ReadFile(dir_ + "/openssl.log");
  auto tls = [this](const std::string& name) {
    return std::vector<std::string>{absl::StrCat("--tls_cert=", dir_, "/", name, ".pem"),
                                    absl::StrCat("--tls_key=", dir_, "/", name, ".key"),
                                    absl::StrCat("--tls_ca=", dir_, "/ca.pem")};
  };
  DaemonProcess* decode = Launch("decode", "d", tls("d"));
  ASSERT_TRUE(Launch("prefill", "p", tls("p")) != nullptr && decode != nullptr);
  MakeRegions("p", "d", 2, 8);
  ASSERT_TRUE(Expect("d", "tls").ok());
  ASSERT_TRUE(Offer("p", "tls", decode->peer_address(), "lynx").ok());
  const absl::Status done = Watch("d", "tls", v1::SIDE_DECODE);
  ASSERT_TRUE(done.ok()) << done << "\nprefill log:\n" << ReadFile(dir_ + "/p.log");
  EXPECT_TRUE(DecodeRegionIsExact("lynx"));

  // A daemon without TLS cannot even complete the handshake with the TLS peer service.
  ASSERT_TRUE(Launch("prefill", "plain") != nullptr);
  ASSERT_TRUE(RegisterSource("plain").ok());
  ASSERT_TRUE(Expect("d", "plain").ok());
  ASSERT_TRUE(Offer("plain", "plain", decode->peer_address()).ok());
  const absl::Status refused = Watch("plain", "plain", v1::SIDE_PREFILL);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
}

TEST_F(ProcessTest, SharedTokenAdmitsAPeerWithTheSameTokenAndRejectsOneWithAnother) {
  const std::string token = absl::StrCat(dir_, "/token");
  const std::string other = absl::StrCat(dir_, "/other-token");
  std::ofstream(token) << "s3cret-kvt-token\n";
  std::ofstream(other) << "not-the-token\n";
  DaemonProcess* decode = Launch("decode", "d", {absl::StrCat("--peer_token_file=", token)});
  ASSERT_TRUE(Launch("prefill", "p", {absl::StrCat("--peer_token_file=", token)}) != nullptr &&
              decode != nullptr);
  MakeRegions("p", "d", 2, 8);
  ASSERT_TRUE(Expect("d", "same").ok());
  ASSERT_TRUE(Offer("p", "same", decode->peer_address()).ok());
  const absl::Status done = Watch("d", "same", v1::SIDE_DECODE);
  EXPECT_TRUE(done.ok()) << done;
  EXPECT_TRUE(Watch("p", "same", v1::SIDE_PREFILL).ok());

  ASSERT_TRUE(Launch("prefill", "wrong", {absl::StrCat("--peer_token_file=", other)}) != nullptr);
  ASSERT_TRUE(RegisterSource("wrong").ok());
  ASSERT_TRUE(Offer("wrong", "wrong", decode->peer_address()).ok());
  const absl::Status rejected = Watch("wrong", "wrong", v1::SIDE_PREFILL);
  EXPECT_EQ(rejected.code(), absl::StatusCode::kUnauthenticated) << rejected;
  EXPECT_THAT(std::string(rejected.message()), HasSubstr("kvt-token"));
}

uint32_t ModeOf(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return ~0u;
  return st.st_mode & 07777;
}

TEST_F(ProcessTest, ClientSocketIsCreatedWithTheRequestedOctalMode) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      TryLaunch("both", "a", {"--client_socket_mode=0600"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ(ModeOf((*daemon)->client_socket()), 0600u) << std::oct << ModeOf((*daemon)->client_socket());
}

TEST_F(ProcessTest, ClientSocketGetsTheDefaultModeAndASecondDaemonOnItFailsWithAlreadyExists) {
  DaemonProcess* first = Launch("both", "a");
  ASSERT_TRUE(first != nullptr);
  EXPECT_EQ(ModeOf(first->client_socket()), 0660u) << std::oct << ModeOf(first->client_socket());

  absl::StatusOr<std::unique_ptr<DaemonProcess>> second =
      DaemonProcess::Launch(kvtd_, "a2", BaseFlags("both", "a"), dir_, kStartTimeout);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  const std::string log = ReadFile(dir_ + "/a2.log");
  EXPECT_THAT(log, HasSubstr("ALREADY_EXISTS"));
  EXPECT_THAT(log, HasSubstr("another daemon"));
  // The first one still owns the socket and serves.
  EXPECT_TRUE(ClientOf("a").Stats().ok());
}

TEST_F(ProcessTest, StaleClientSocketOfAKilledDaemonIsReplacedByTheNextOne) {
  DaemonProcess* first = Launch("both", "a");
  ASSERT_TRUE(first != nullptr);
  clients_.erase("a");
  first->Kill();
  ASSERT_NE(ModeOf(SocketPath("a")), ~0u) << "SIGKILL left no stale socket to test with";
  ASSERT_TRUE(Launch("both", "a") != nullptr);
  absl::StatusOr<v1::StatsResponse> stats = ClientOf("a").Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
}

TEST_F(ProcessTest, MetricsEndpointCountsADoneTransferAndTheBytesReceived) {
  DaemonProcess* decode = Launch("decode", "d");
  ASSERT_TRUE(Launch("prefill", "p") != nullptr && decode != nullptr);
  ASSERT_GT(decode->metrics_port(), 0);
  MakeRegions("p", "d", 2, 8);
  ASSERT_TRUE(Expect("d", "m").ok());
  ASSERT_TRUE(Offer("p", "m", decode->peer_address()).ok());
  const absl::Status done = Watch("d", "m", v1::SIDE_DECODE);
  ASSERT_TRUE(done.ok()) << done;

  absl::StatusOr<std::string> response = HttpGet(decode->metrics_port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(*response, ::testing::StartsWith("HTTP/1."));
  EXPECT_THAT(*response, HasSubstr(" 200 "));
  EXPECT_EQ(SampleSum(*response, "kvt_transfers_total", {"role=\"decode\"", "outcome=\"done\""}), 1.0)
      << *response;
  EXPECT_LE(SampleSum(*response, "kvt_transfers_total", {"outcome=\"failed\""}), 0.0) << *response;
  // int8 over 2 layers x K/V x 128 tokens x 256 channels: at least one byte per value arrived.
  EXPECT_GE(SampleSum(*response, "kvt_bytes_received_total", {}), 2.0 * 2 * 128 * 256) << *response;
}

}  // namespace
}  // namespace kvt::e2e
