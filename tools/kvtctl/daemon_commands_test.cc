// kvtctl stats / watch / timeline against a prefill and a decode kvtd running in this process (tcp on
// loopback), after one small transfer; and their formatting on hand-made daemon answers.
#include "tools/kvtctl/daemon_commands.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/daemon.h"
#include "tests/e2e/daemon_pair.h"
#include "tools/kvtctl/command.h"
#include "tools/kvtctl/kvtctl.h"

namespace kvt::kvtctl {
namespace {

constexpr uint32_t kLayers = 4;
constexpr uint32_t kBlocks = 16;
constexpr uint32_t kBlockTokens = 16;
constexpr uint64_t kTokens = 100;  // 7 blocks
constexpr char kRequest[] = "r1";

struct CliResult {
  int code;
  std::string out, err;
};

CliResult Kvtctl(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunKvtctl(args, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// One prefill and one decode daemon for the whole suite, and one finished lynx transfer "r1" between them.
class DaemonCommandsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<e2e::DaemonPair> pair = e2e::StartDaemonPair();
    ASSERT_TRUE(pair.ok()) << pair.status();
    prefill_ = std::move(pair->prefill);
    decode_ = std::move(pair->decode);
    prefill_client_ = std::move(pair->prefill_client);
    decode_client_ = std::move(pair->decode_client);

    const kv::KvLayoutSpec layout = e2e::DenseLayout(kLayers, kBlocks, kBlockTokens, 2, 64);
    auto src = e2e::MakeKvCache(layout, 7, true);
    ASSERT_TRUE(src.ok()) << src.status();
    src_ = std::make_unique<e2e::KvCache>(*std::move(src));
    auto dst = e2e::MakeKvCache(layout, 0, false);
    ASSERT_TRUE(dst.ok()) << dst.status();
    dst_ = std::make_unique<e2e::KvCache>(*std::move(dst));
    ASSERT_TRUE(
        prefill_client_->RegisterRegion("src", src_->proto(), src_->memory->name(), src_->memory->size())
            .ok());
    ASSERT_TRUE(
        decode_client_->RegisterRegion("dst", dst_->proto(), dst_->memory->name(), dst_->memory->size())
            .ok());

    const std::vector<uint32_t> blocks = {3, 1, 4, 0, 5, 9, 2};
    ExpectSpec e;
    e.request_id = kRequest;
    e.region_id = "dst";
    e.block_ids = blocks;
    e.num_tokens = kTokens;
    e.deadline = absl::Seconds(30);
    ASSERT_TRUE(decode_client_->Expect(e).ok());
    OfferSpec o;
    o.request_id = kRequest;
    o.region_id = "src";
    o.block_ids = blocks;
    o.num_tokens = kTokens;
    o.scheme = "lynx";
    o.decode_daemon = decode_->peer_address();
    o.deadline = absl::Seconds(30);
    for (uint32_t l = 0; l < kLayers; ++l) o.ready_layers.push_back(l);
    ASSERT_TRUE(prefill_client_->Offer(o).ok());
    absl::Status done = decode_client_->Watch(
        kRequest, [](const v1::TransferEvent&) {}, absl::Seconds(30));
    ASSERT_TRUE(done.ok()) << done;
    done = prefill_client_->Watch(
        kRequest, [](const v1::TransferEvent&) {}, absl::Seconds(30));
    ASSERT_TRUE(done.ok()) << done;
  }

  static void TearDownTestSuite() {
    decode_client_.reset();
    prefill_client_.reset();
    decode_.reset();
    prefill_.reset();
    dst_.reset();
    src_.reset();
  }

  void SetUp() override {
    ASSERT_NE(decode_, nullptr) << "the daemons did not start";
    ASSERT_NE(decode_client_, nullptr);
  }

  static std::string DecodeSocket() { return decode_->client_socket(); }

  // Suite-wide, released in TearDownTestSuite (clients before daemons, daemons before the regions' memory).
  static inline std::unique_ptr<server::Daemon> prefill_;
  static inline std::unique_ptr<server::Daemon> decode_;
  static inline std::unique_ptr<Client> prefill_client_;
  static inline std::unique_ptr<Client> decode_client_;
  static inline std::unique_ptr<e2e::KvCache> src_;
  static inline std::unique_ptr<e2e::KvCache> dst_;
};

TEST_F(DaemonCommandsTest, StatsShowsTheFinishedTransferOnTheDecodeDaemon) {
  const CliResult r = Kvtctl({"stats", "--socket", DecodeSocket()});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(daemon id +decode\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(transfers done +1\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(transfers failed +0\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(regions +1\n)"))) << r.out;
  EXPECT_EQ(r.out.find("request "), std::string::npos) << "no request table without --requests\n" << r.out;
}

TEST_F(DaemonCommandsTest, StatsJsonHasTheDaemonsNumbers) {
  auto direct = decode_client_->Stats();
  ASSERT_TRUE(direct.ok()) << direct.status();
  const CliResult r = Kvtctl({"stats", "--socket=" + DecodeSocket(), "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["daemon_id"], "decode");
  EXPECT_EQ(j["transfers_done"], 1);
  EXPECT_EQ(j["transfers_failed"], 0);
  EXPECT_GT(j["bytes_received"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["bytes_received"].get<uint64_t>(), direct->bytes_received());
  EXPECT_EQ(j["regions"], 1);
  EXPECT_FALSE(j.contains("requests"));

  const CliResult p = Kvtctl({"stats", "--socket=" + prefill_->client_socket(), "--json"});
  ASSERT_EQ(p.code, kExitOk) << p.err;
  const nlohmann::json pj = nlohmann::json::parse(p.out);
  EXPECT_EQ(pj["daemon_id"], "prefill");
  EXPECT_GT(pj["anchor_bytes_sent"].get<uint64_t>(), 0u);
  EXPECT_GT(pj["residual_bytes_sent"].get<uint64_t>(), 0u);
}

TEST_F(DaemonCommandsTest, StatsWithRequestsListsALiveRequest) {
  ExpectSpec e;
  e.request_id = "pending-1";
  e.region_id = "dst";
  e.block_ids = {10, 11};
  e.num_tokens = 20;
  e.deadline = absl::Seconds(30);
  ASSERT_TRUE(decode_client_->Expect(e).ok());
  const CliResult r = Kvtctl({"stats", "--socket", DecodeSocket(), "--requests"});
  const CliResult j = Kvtctl({"stats", "--socket", DecodeSocket(), "--requests", "--json"});
  ASSERT_TRUE(decode_client_->Cancel("pending-1").ok());

  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\npending-1 +decode )"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(in flight +1\n)"))) << r.out;
  ASSERT_EQ(j.code, kExitOk) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["requests"].size(), 1u) << j.out;
  EXPECT_EQ(doc["requests"][0]["request_id"], "pending-1");
  EXPECT_EQ(doc["requests"][0]["side"], "decode");
}

TEST_F(DaemonCommandsTest, WatchPrintsEachLayersAnchorAndFullThenDoneAndExitsZero) {
  const CliResult r = Kvtctl({"watch", "--socket", DecodeSocket(), "--side=decode", kRequest});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2 * kLayers + 1) << r.out;
  for (const std::string& line : lines) {
    EXPECT_TRUE(std::regex_match(line, std::regex(R"(\+\d+\.\d ms  [A-Z_]+( layer \d+)?)"))) << line;
  }
  for (uint32_t l = 0; l < kLayers; ++l) {
    const size_t anchor = r.out.find(absl::StrCat("ANCHOR_READY layer ", l, "\n"));
    const size_t full = r.out.find(absl::StrCat("FULL_READY layer ", l, "\n"));
    ASSERT_NE(anchor, std::string::npos) << r.out;
    ASSERT_NE(full, std::string::npos) << r.out;
    EXPECT_LT(anchor, full) << "layer " << l << "\n" << r.out;
  }
  EXPECT_TRUE(std::regex_match(lines.back(), std::regex(R"(\+\d+\.\d ms  DONE)"))) << lines.back();
}

TEST_F(DaemonCommandsTest, WatchOfTheDaemonsOnlySideNeedsNoSideFlag) {
  const CliResult r = Kvtctl({"watch", "--socket", prefill_->client_socket(), kRequest});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(Count(r.out, "FULL_READY layer"), static_cast<int>(kLayers)) << r.out;
  EXPECT_NE(r.out.find("DONE"), std::string::npos) << r.out;
}

TEST_F(DaemonCommandsTest, WatchOfAnUnknownRequestExitsOneSayingNotFound) {
  const CliResult r = Kvtctl({"watch", "--socket", DecodeSocket(), "no-such-request"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no-such-request"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(DaemonCommandsTest, WatchOfAFailedRequestPrintsItsStatusAndExitsOne) {
  ExpectSpec e;
  e.request_id = "doomed";
  e.region_id = "dst";
  e.block_ids = {12};
  e.num_tokens = 16;
  ASSERT_TRUE(decode_client_->Expect(e).ok());
  ASSERT_TRUE(decode_client_->Cancel("doomed").ok());
  const CliResult r = Kvtctl({"watch", "--socket", DecodeSocket(), "doomed"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(^\+\d+\.\d ms  FAILED CANCELLED: .*doomed)"))) << r.out;
  EXPECT_NE(r.err.find("request doomed failed: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(CANCELLED)"), std::string::npos) << r.err;

  // timeline shows the request as far as it got (no layer arrived) and exits 1 too.
  const CliResult t = Kvtctl({"timeline", "--socket", DecodeSocket(), "--request=doomed", "--svg="});
  EXPECT_EQ(t.code, kExitFailure);
  EXPECT_NE(t.out.find("request doomed (decode side): not done: "), std::string::npos) << t.out;
  EXPECT_NE(t.err.find("not every request finished"), std::string::npos) << t.err;
}

TEST_F(DaemonCommandsTest, WatchNeedsExactlyOneRequestId) {
  CliResult r = Kvtctl({"watch", "--socket", DecodeSocket()});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("REQUEST_ID"), std::string::npos) << r.err;
  r = Kvtctl({"watch", "--socket", DecodeSocket(), "a", "b"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("unexpected argument 'b'"), std::string::npos) << r.err;
  r = Kvtctl({"watch", "--side=both", "a"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--side"), std::string::npos) << r.err;
}

TEST_F(DaemonCommandsTest, TimelineWritesAnSvgWithOneAnchorMarkPerLayer) {
  const std::string svg_path = TempPath("timeline.svg");
  const CliResult r =
      Kvtctl({"timeline", "--socket", DecodeSocket(), "--request", kRequest, "--svg", svg_path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::ifstream in(svg_path);
  ASSERT_TRUE(in.good()) << svg_path;
  std::stringstream svg;
  svg << in.rdbuf();
  EXPECT_EQ(Count(svg.str(), "<circle class=\"anchor\""), static_cast<int>(kLayers)) << svg.str();
  EXPECT_EQ(Count(svg.str(), "class=\"full\""), static_cast<int>(kLayers)) << svg.str();
  EXPECT_NE(svg.str().find(kRequest), std::string::npos);
  // The table: a header line, then one row per layer with both times.
  EXPECT_NE(r.out.find("request r1 (decode side): done at"), std::string::npos) << r.out;
  for (uint32_t l = 0; l < kLayers; ++l) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex(absl::StrCat(R"(\n +)", l, R"( +\d+\.\d +\d+\.\d\n)"))))
        << "layer " << l << "\n"
        << r.out;
  }
}

TEST_F(DaemonCommandsTest, TimelineOfTwoRequestsDrawsBothAndJsonHasTheirLayers) {
  const std::string svg_path = TempPath("two.svg");
  const CliResult r = Kvtctl({"timeline", "--socket", DecodeSocket(), "--request", kRequest, "--request=r1",
                              "--svg=" + svg_path, "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["requests"].size(), 2u) << r.out;
  EXPECT_EQ(j["svg"], svg_path);
  for (const nlohmann::json& req : j["requests"]) {
    EXPECT_EQ(req["status"], "OK");
    ASSERT_EQ(req["layers"].size(), kLayers) << r.out;
    for (const nlohmann::json& l : req["layers"]) {
      EXPECT_LE(l["anchor_ms"].get<double>(), l["full_ms"].get<double>()) << l;
      EXPECT_LE(l["full_ms"].get<double>(), req["done_ms"].get<double>()) << l;
    }
  }
  std::ifstream in(svg_path);
  std::stringstream svg;
  svg << in.rdbuf();
  EXPECT_EQ(Count(svg.str(), "<circle class=\"anchor\""), static_cast<int>(2 * kLayers));
}

TEST_F(DaemonCommandsTest, TimelineOfAnUnknownRequestExitsOneSayingNotFound) {
  const std::string svg_path = TempPath("unknown.svg");
  const CliResult r = Kvtctl({"timeline", "--socket", DecodeSocket(), "--request", kRequest, "--request",
                              "nope", "--svg", svg_path});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  EXPECT_NE(access(svg_path.c_str(), F_OK), 0) << "no SVG when a request cannot be watched";
}

TEST_F(DaemonCommandsTest, TimelineNeedsARequest) {
  const CliResult r = Kvtctl({"timeline", "--socket", DecodeSocket()});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--request"), std::string::npos) << r.err;
}

// No daemon: the commands say which socket and how to start kvtd, and do not wait out a connect timeout.

TEST(DaemonCommandsWithoutDaemonTest, StatsOnAMissingSocketExitsOneNamingThePath) {
  const std::string path = absl::StrCat("/tmp/kvtctl-test-", getpid(), "-absent.sock");
  const absl::Time start = absl::Now();
  const CliResult r = Kvtctl({"stats", "--socket", path});
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("start one (kvtd --client_socket="), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(DaemonCommandsWithoutDaemonTest, WatchOnAStaleSocketFileExitsOneNamingThePath) {
  // A socket file left behind by a daemon that is gone: bound, never listening.
  const std::string path = absl::StrCat("/tmp/kvtctl-test-", getpid(), "-stale.sock");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  unlink(path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  close(fd);
  const absl::Time start = absl::Now();
  const CliResult r = Kvtctl({"watch", "--socket", path, "r1"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  unlink(path.c_str());
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no kvtd is listening"), std::string::npos) << r.err;
}

// Formatting of hand-made answers.

TEST(FormatEventTest, FailedEventsCarryTheirStatus) {
  v1::TransferEvent e;
  e.set_kind(v1::TransferEvent::FAILED);
  e.set_at_us(40050);
  e.set_status_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  e.set_message("deadline passed");
  EXPECT_EQ(FormatEvent(e), "+40.0 ms  FAILED DEADLINE_EXCEEDED: deadline passed");
  e.set_kind(v1::TransferEvent::ANCHOR_READY);
  e.set_layer(4);
  e.set_at_us(12345);
  EXPECT_EQ(FormatEvent(e), "+12.3 ms  ANCHOR_READY layer 4");
}

TEST(TimelineFromEventsTest, LayersWithoutEventsHaveNoTimes) {
  std::vector<v1::TransferEvent> events(3);
  events[0].set_kind(v1::TransferEvent::ANCHOR_READY);
  events[0].set_layer(2);
  events[0].set_at_us(1500);
  events[1].set_kind(v1::TransferEvent::FULL_READY);
  events[1].set_layer(2);
  events[1].set_at_us(3000);
  events[2].set_kind(v1::TransferEvent::FAILED);
  events[2].set_at_us(4000);
  const TimelineSeries s = TimelineFromEvents("r", events);
  EXPECT_EQ(s.label, "r");
  ASSERT_EQ(s.layers.size(), 3u);
  EXPECT_EQ(s.layers[0].layer, 0u);
  EXPECT_FALSE(s.layers[0].anchor_ms.has_value());
  EXPECT_FALSE(s.layers[1].full_ms.has_value());
  EXPECT_EQ(s.layers[2].layer, 2u);
  EXPECT_DOUBLE_EQ(s.layers[2].anchor_ms.value_or(-1), 1.5);
  EXPECT_DOUBLE_EQ(s.layers[2].full_ms.value_or(-1), 3.0);
  EXPECT_FALSE(s.done_ms.has_value());
}

TEST(FormatStatsTest, RequestsTableSaysWhenThereAreNone) {
  v1::StatsResponse s;
  s.set_daemon_id("d");
  s.set_anchor_bytes_sent(1500000);
  EXPECT_NE(FormatStats(s, false).find("anchor sent (MB)       1.50\n"), std::string::npos)
      << FormatStats(s, false);
  EXPECT_NE(FormatStats(s, true).find("no live requests"), std::string::npos);
  v1::RequestState* r = s.add_requests();
  r->set_request_id("a-long-request-id");
  r->set_side(v1::SIDE_PREFILL);
  r->set_num_layers(32);
  r->set_layers_full_ready(7);
  const std::string table = FormatStats(s, true);
  EXPECT_NE(table.find("a-long-request-id prefill  -"), std::string::npos) << table;
  EXPECT_NE(table.find("0/7 of 32"), std::string::npos) << table;
}

}  // namespace
}  // namespace kvt::kvtctl
