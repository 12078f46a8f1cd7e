// Two kvtd processes, one request per codec scheme, all in flight at once: every decode region must hold, bit for
// bit, what the codec's own decode of the source gives. Also: both daemons answer the standard gRPC health check.
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "codec/scheme.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon_pair.h"
#include "tools/kvtctl/daemon_process.h"

namespace kvt::e2e {
namespace {

std::string KvtdPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/kvt/server/kvtd");
}

class SchemesProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/kvts-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    prefill_.reset();
    decode_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<kvtctl::DaemonProcess> Launch(const std::string& role) {
    auto d = kvtctl::DaemonProcess::Launch(
        KvtdPath(), role,
        {absl::StrCat("--role=", role), absl::StrCat("--daemon_id=", role),
         absl::StrCat("--client_socket=", dir_, "/", role, ".sock"), "--peer_listen=127.0.0.1:0",
         "--metrics_listen=", "--ucx_net_devices=lo", "--codec_threads=2"},
        dir_, absl::Seconds(20));
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : nullptr;
  }

  std::string dir_;
  std::unique_ptr<kvtctl::DaemonProcess> prefill_;
  std::unique_ptr<kvtctl::DaemonProcess> decode_;
};

TEST_F(SchemesProcessTest, EverySchemeInFlightAtOnceLandsBitForBitAsTheCodecDecodesIt) {
  prefill_ = Launch("prefill");
  decode_ = Launch("decode");
  ASSERT_TRUE(prefill_ != nullptr && decode_ != nullptr);
  ClientOptions co;
  co.socket = prefill_->client_socket();
  auto pc = Client::Connect(co);
  ASSERT_TRUE(pc.ok()) << pc.status();
  co.socket = decode_->client_socket();
  auto dc = Client::Connect(co);
  ASSERT_TRUE(dc.ok()) << dc.status();

  std::vector<std::string> schemes = codec::StandardSchemeNames();
  schemes.push_back("lynx-a4r4");
  schemes.push_back("lynx+spike");
  constexpr uint32_t kBlocksPerRequest = 9;  // 144 tokens: a 128-token page of whole chunks and a 16-token tail
  constexpr uint64_t kTokens = 140;
  const uint32_t blocks = kBlocksPerRequest * static_cast<uint32_t>(schemes.size());
  const auto layout = DenseLayout(3, blocks, 16, 4, 32, kv::KvDType::kFloat16, kv::BlockOrder::kHnd);
  auto src = MakeKvCache(layout, 11, true);
  ASSERT_TRUE(src.ok()) << src.status();
  auto dst = MakeKvCache(layout, 0, false);
  ASSERT_TRUE(dst.ok()) << dst.status();
  ASSERT_TRUE((*pc)->RegisterRegion("src", src->proto(), src->memory->name(), src->memory->size()).ok());
  ASSERT_TRUE((*dc)->RegisterRegion("dst", dst->proto(), dst->memory->name(), dst->memory->size()).ok());

  auto block_ids = [&](size_t r, bool source) {
    std::vector<uint32_t> ids;
    for (uint32_t b = 0; b < kBlocksPerRequest; ++b) {
      // Sources in order, destinations reversed, so a mix-up of blocks shows.
      const uint32_t i = source ? b : kBlocksPerRequest - 1 - b;
      ids.push_back(static_cast<uint32_t>(r) * kBlocksPerRequest + i);
    }
    return ids;
  };
  for (size_t r = 0; r < schemes.size(); ++r) {
    ExpectSpec e;
    e.request_id = absl::StrCat("s", r);
    e.region_id = "dst";
    e.block_ids = block_ids(r, false);
    e.num_tokens = kTokens;
    e.source_daemon = "prefill";
    ASSERT_TRUE((*dc)->Expect(e).ok()) << schemes[r];
  }
  for (size_t r = 0; r < schemes.size(); ++r) {
    OfferSpec o;
    o.request_id = absl::StrCat("s", r);
    o.region_id = "src";
    o.block_ids = block_ids(r, true);
    o.num_tokens = kTokens;
    o.ready_layers = {0, 1, 2};
    o.scheme = schemes[r];
    o.decode_daemon = decode_->peer_address();
    ASSERT_TRUE((*pc)->Offer(o).ok()) << schemes[r];
  }
  for (size_t r = 0; r < schemes.size(); ++r) {
    EXPECT_TRUE((*dc)->Watch(absl::StrCat("s", r), [](const v1::TransferEvent&) {}, absl::Seconds(60)).ok())
        << schemes[r];
  }
  // Every request wrote only its own blocks; compute what they must hold, request by request.
  std::vector<uint8_t> expected(dst->memory->size(), 0);
  for (size_t r = 0; r < schemes.size(); ++r) {
    auto e = ExpectedAfterTransfer(*src, block_ids(r, true), layout, block_ids(r, false), kTokens, schemes[r],
                                   expected);
    ASSERT_TRUE(e.ok()) << schemes[r] << ": " << e.status();
    expected = *std::move(e);
  }
  // Name the scheme of every request whose blocks differ.
  const uint64_t block_bytes = uint64_t{16} * 4 * 32 * 2;
  std::vector<bool> bad(schemes.size(), false);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != dst->memory->data()[i]) {
      bad[(i % layout.kv_stride_bytes) / block_bytes / kBlocksPerRequest] = true;
    }
  }
  for (size_t r = 0; r < schemes.size(); ++r) EXPECT_FALSE(bad[r]) << schemes[r] << " landed different bytes";
}

// grpc.health.v1.Health/Check with an empty HealthCheckRequest; SERVING is field 1 = 1 (bytes 08 01).
absl::StatusOr<std::string> HealthCheck(const std::string& target) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok) || !ok) return absl::UnavailableError("health call did not complete");
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

TEST_F(SchemesProcessTest, BothServicesAnswerTheStandardHealthCheckAsServing) {
  decode_ = Launch("decode");
  ASSERT_TRUE(decode_ != nullptr);
  for (const std::string& target : {absl::StrCat("unix:", decode_->client_socket()), decode_->peer_address()}) {
    absl::StatusOr<std::string> answer = HealthCheck(target);
    ASSERT_TRUE(answer.ok()) << target << ": " << answer.status();
    EXPECT_EQ(*answer, std::string("\x08\x01", 2)) << target;
  }
}

}  // namespace
}  // namespace kvt::e2e
