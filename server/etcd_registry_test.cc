// EtcdRegistry and EtcdClient against a real etcd (Debian's etcd-server, started here on loopback ports).
#include "server/etcd_registry.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/certificates.h"

namespace kvt::server {
namespace {

using ::testing::HasSubstr;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

const char* EtcdBinary() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return nullptr;
}

// One etcd member on loopback, its data in a temporary directory; Kill() and Start() again keep the data.
class EtcdProcess {
 public:
  // With `tls`, etcd serves https with dir/etcd.pem and requires client certificates signed by dir/ca.pem.
  explicit EtcdProcess(std::string tls_dir = "") : client_port_(FreePort()), peer_port_(FreePort()),
                                                   tls_dir_(std::move(tls_dir)) {
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("etcd-", getpid(), "-", client_port_);
    std::filesystem::remove_all(dir_);
  }
  ~EtcdProcess() {
    Kill();
    std::filesystem::remove_all(dir_);
  }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }
  // Options that reach this etcd (TLS with the "client" certificate when it serves https).
  EtcdOptions Client() const {
    EtcdOptions o{.endpoints = {endpoint()}, .call_timeout = absl::Milliseconds(500)};
    if (!tls_dir_.empty()) {
      o.ca_file = tls_dir_ + "/ca.pem";
      o.cert_file = tls_dir_ + "/client.pem";
      o.key_file = tls_dir_ + "/client.key";
    }
    return o;
  }

  void Start() {
    const std::string scheme = tls_dir_.empty() ? "http" : "https";
    const std::string client = absl::StrCat(scheme, "://127.0.0.1:", client_port_);
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = (dir_.parent_path() / absl::StrCat("etcd-", client_port_, ".log")).string();
      freopen(log.c_str(), "a", stdout);
      freopen(log.c_str(), "a", stderr);
      const std::string cluster = absl::StrCat("kvt-test=", peer);
      std::vector<std::string> argv = {"etcd", "--name", "kvt-test", "--data-dir", dir_.string(),
                                       "--listen-client-urls", client, "--advertise-client-urls", client,
                                       "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                       "--initial-cluster", cluster};
      if (!tls_dir_.empty()) {
        for (const std::string& flag : {"--cert-file=" + tls_dir_ + "/etcd.pem", "--key-file=" + tls_dir_ + "/etcd.key",
                                        "--trusted-ca-file=" + tls_dir_ + "/ca.pem", std::string("--client-cert-auth")}) {
          argv.push_back(flag);
        }
      }
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(EtcdBinary(), args.data());
      _exit(127);
    }
    // Ready when a read succeeds, on a new channel each time (a channel that met the port closed backs off).
    absl::Status last;
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while (absl::Now() < until) {
      auto etcd = EtcdClient::Create(Client());
      const auto got = (*etcd)->Get("/ready");
      if (got.ok()) return;
      last = got.status();
      absl::SleepFor(absl::Milliseconds(100));
    }
    FAIL() << "etcd did not come up on " << endpoint() << ": " << last;
  }

  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  const int client_port_;
  const int peer_port_;
  const std::string tls_dir_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

v1::DaemonRecord Record(const std::string& id, const std::string& address) {
  v1::DaemonRecord r;
  r.set_daemon_id(id);
  r.set_role("decode");
  r.set_peer_address(address);
  r.add_schemes("lynx");
  return r;
}

EtcdRegistryOptions Options(const EtcdProcess& etcd, absl::Duration ttl = absl::Seconds(10)) {
  EtcdRegistryOptions o;
  o.etcd.endpoints = {etcd.endpoint()};
  o.etcd.call_timeout = absl::Milliseconds(500);
  o.prefix = "/kvt-test";
  o.ttl = ttl;
  return o;
}

// Polls `pred` for up to `timeout`.
bool Eventually(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return pred();
}

class EtcdRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdBinary() == nullptr) GTEST_SKIP() << "no etcd binary (Debian's etcd-server; ./kvt test installs it)";
    etcd_.Start();
  }
  EtcdProcess etcd_;
};

TEST_F(EtcdRegistryTest, DaemonsResolveEachOtherByIdAndAddressesPassThrough) {
  auto a = EtcdRegistry::Start(Options(etcd_), Record("decode-a", "127.0.0.1:1111"));
  auto b = EtcdRegistry::Start(Options(etcd_), Record("prefill-b", "127.0.0.1:2222"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_TRUE((*a)->registered());
  EXPECT_EQ(*(*b)->Resolve("decode-a"), "127.0.0.1:1111");
  EXPECT_EQ(*(*a)->Resolve("prefill-b"), "127.0.0.1:2222");
  EXPECT_EQ(*(*a)->Resolve("10.0.0.7:7470"), "10.0.0.7:7470");
  const auto missing = (*b)->Resolve("nobody");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("kvtctl peers"));
  EXPECT_EQ((*b)->Resolve("bad id!").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->Resolve("").status().code(), absl::StatusCode::kInvalidArgument);

  auto client = EtcdClient::Create({.endpoints = {etcd_.endpoint()}});
  auto listed = ListDaemons(**client, "/kvt-test");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].daemon_id(), "decode-a");
  EXPECT_EQ((*listed)[0].schemes(0), "lynx");
  EXPECT_EQ((*listed)[1].peer_address(), "127.0.0.1:2222");
}

TEST_F(EtcdRegistryTest, StoppedDaemonLeavesAtOnceAndAKilledOneWhenItsLeaseExpires) {
  auto watcher = EtcdRegistry::Start(Options(etcd_), Record("watcher", "127.0.0.1:1"));
  auto stopped = EtcdRegistry::Start(Options(etcd_), Record("stopped", "127.0.0.1:2"));
  auto killed = EtcdRegistry::Start(Options(etcd_, absl::Seconds(2)), Record("killed", "127.0.0.1:3"));
  ASSERT_TRUE(watcher.ok() && stopped.ok() && killed.ok());
  ASSERT_TRUE(Eventually([&] { return (*watcher)->Resolve("killed").ok() && (*watcher)->Resolve("stopped").ok(); },
                         absl::Seconds(5)));
  (*stopped)->Stop();  // revokes its lease
  EXPECT_TRUE(Eventually([&] { return !(*watcher)->Resolve("stopped").ok(); }, absl::Seconds(2)));
  EXPECT_EQ((*watcher)->Resolve("stopped").status().code(), absl::StatusCode::kNotFound);

  const absl::Time abandoned = absl::Now();
  (*killed)->Abandon();  // as kill -9: nobody revokes, the lease runs out
  EXPECT_TRUE((*watcher)->Resolve("killed").ok());
  EXPECT_TRUE(Eventually([&] { return !(*watcher)->Resolve("killed").ok(); }, absl::Seconds(8)));
  EXPECT_GE(absl::Now() - abandoned, absl::Seconds(1));  // it was the lease, not an instant revoke
  EXPECT_EQ((*watcher)->Resolve("killed").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EtcdRegistryTest, EtcdRestartKeepsCachedIdsAndNewDaemonsResolveOnceItIsBack) {
  auto a = EtcdRegistry::Start(Options(etcd_), Record("a", "127.0.0.1:10"));
  auto b = EtcdRegistry::Start(Options(etcd_), Record("b", "127.0.0.1:20"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(Eventually([&] { return (*b)->CachedIds() == std::vector<std::string>{"a", "b"}; },
                         absl::Seconds(5)));

  etcd_.Kill();
  EXPECT_EQ(*(*b)->Resolve("a"), "127.0.0.1:10");  // from the watch's cache
  const auto unknown = (*b)->Resolve("c");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnavailable) << unknown.status();

  etcd_.Start();  // same data: the leases and keys survive
  auto c = EtcdRegistry::Start(Options(etcd_), Record("c", "127.0.0.1:30"));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(Eventually([&] { return (*b)->Resolve("c").ok(); }, absl::Seconds(5)));
  EXPECT_EQ(*(*b)->Resolve("c"), "127.0.0.1:30");
  EXPECT_EQ(*(*c)->Resolve("a"), "127.0.0.1:10");  // a's keep-alives resumed on the same lease
}

TEST_F(EtcdRegistryTest, ADaemonStartedBeforeEtcdRegistersWhenEtcdComesUp) {
  etcd_.Kill();
  auto early = EtcdRegistry::Start(Options(etcd_, absl::Seconds(3)), Record("early", "127.0.0.1:40"));
  ASSERT_TRUE(early.ok()) << early.status();  // the daemon starts anyway
  EXPECT_FALSE((*early)->registered());
  etcd_.Start();
  EXPECT_TRUE(Eventually([&] { return (*early)->registered(); }, absl::Seconds(5)));
  auto other = EtcdRegistry::Start(Options(etcd_), Record("other", "127.0.0.1:50"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*(*other)->Resolve("early"), "127.0.0.1:40");
}

TEST(EtcdTlsTest, DaemonsRegisterOverMutualTlsAndClientsWithoutCertificatesAreRefused) {
  if (EtcdBinary() == nullptr || !testutil::HaveOpenssl()) GTEST_SKIP() << "needs etcd and openssl";
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / absl::StrCat("etcd-tls-", getpid())).string();
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(testutil::MakeCertificates(dir, {"etcd", "client"}));
  EtcdProcess etcd(dir);
  etcd.Start();
  EtcdRegistryOptions o;
  o.etcd = etcd.Client();
  o.prefix = "/kvt-tls";
  auto a = EtcdRegistry::Start(o, Record("tls-a", "127.0.0.1:1"));
  auto b = EtcdRegistry::Start(o, Record("tls-b", "127.0.0.1:2"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_TRUE((*a)->registered());
  EXPECT_EQ(*(*b)->Resolve("tls-a"), "127.0.0.1:1");

  auto https = EtcdClient::Create({.endpoints = {"https://" + etcd.endpoint()}, .ca_file = dir + "/ca.pem",
                                   .cert_file = dir + "/client.pem", .key_file = dir + "/client.key"});
  ASSERT_TRUE(https.ok()) << https.status();
  EXPECT_EQ((*ListDaemons(**https, "/kvt-tls")).size(), 2u);
  auto plaintext = EtcdClient::Create({.endpoints = {etcd.endpoint()}, .call_timeout = absl::Milliseconds(500)});
  EXPECT_FALSE((*plaintext)->Get("/kvt-tls/daemons/tls-a").ok());
  auto no_cert = EtcdClient::Create({.endpoints = {etcd.endpoint()}, .call_timeout = absl::Milliseconds(500),
                                     .ca_file = dir + "/ca.pem"});
  ASSERT_TRUE(no_cert.ok());
  EXPECT_FALSE((*no_cert)->Get("/kvt-tls/daemons/tls-a").ok());  // etcd --client-cert-auth
}

// Turns on etcd's authentication: a root user with the root role, then AuthEnable (as `etcdctl user add root;
// etcdctl user grant-role root root; etcdctl auth enable` would).
void EnableAuth(const std::string& endpoint, const std::string& password) {
  auto channel = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  auto auth = etcdserverpb::Auth::NewStub(channel);
  auto call = [](auto method) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    return method(&context);
  };
  etcdserverpb::AuthRoleAddRequest role;
  role.set_name("root");
  etcdserverpb::AuthRoleAddResponse role_response;
  call([&](grpc::ClientContext* c) { return auth->RoleAdd(c, role, &role_response); });  // may already exist
  etcdserverpb::AuthUserAddRequest user;
  user.set_name("root");
  user.set_password(password);
  etcdserverpb::AuthUserAddResponse user_response;
  ASSERT_TRUE(call([&](grpc::ClientContext* c) { return auth->UserAdd(c, user, &user_response); }).ok());
  etcdserverpb::AuthUserGrantRoleRequest grant;
  grant.set_user("root");
  grant.set_role("root");
  etcdserverpb::AuthUserGrantRoleResponse grant_response;
  ASSERT_TRUE(call([&](grpc::ClientContext* c) { return auth->UserGrantRole(c, grant, &grant_response); }).ok());
  etcdserverpb::AuthEnableRequest enable;
  etcdserverpb::AuthEnableResponse enable_response;
  const grpc::Status enabled = call([&](grpc::ClientContext* c) { return auth->AuthEnable(c, enable, &enable_response); });
  ASSERT_TRUE(enabled.ok()) << enabled.error_message();
}

TEST_F(EtcdRegistryTest, WithAuthenticationOnlyTheRightUserAndPasswordRegister) {
  ASSERT_NO_FATAL_FAILURE(EnableAuth(etcd_.endpoint(), "s3cret"));
  EtcdRegistryOptions o = Options(etcd_);
  o.etcd.username = "root";
  o.etcd.password = "s3cret";
  auto a = EtcdRegistry::Start(o, Record("auth-a", "127.0.0.1:1"));
  auto b = EtcdRegistry::Start(o, Record("auth-b", "127.0.0.1:2"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->registered());
  EXPECT_TRUE(Eventually([&] { return (*b)->CachedIds() == std::vector<std::string>{"auth-a", "auth-b"}; },
                         absl::Seconds(5)));  // the watch carries the token too
  EXPECT_EQ(*(*b)->Resolve("auth-a"), "127.0.0.1:1");

  EtcdOptions wrong = o.etcd;
  wrong.password = "guess";
  const auto denied = (*EtcdClient::Create(wrong))->Get("/kvt-test/daemons/auth-a");
  EXPECT_FALSE(denied.ok());
  EXPECT_THAT(denied.status().message(), HasSubstr("etcd authentication as \"root\""));
  EtcdOptions anonymous = o.etcd;
  anonymous.username.clear();
  EXPECT_FALSE((*EtcdClient::Create(anonymous))->Get("/kvt-test/daemons/auth-a").ok());
}

TEST(EtcdOptionsTest, BadOptionsAreRefusedWithWhatToFix) {
  EXPECT_EQ(EtcdClient::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  const auto tls = EtcdClient::Create({.endpoints = {"https://etcd:2379"}});
  EXPECT_THAT(tls.status().message(), HasSubstr("give the CA"));
  EXPECT_EQ(EtcdClient::Create({.endpoints = {"etcd:2379"}, .ca_file = "/nonexistent/ca.pem"}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(EtcdClient::Create({.endpoints = {"etcd:2379"}, .cert_file = "c.pem"}).status().message(),
              HasSubstr("needs its key"));
  EXPECT_EQ(EtcdClient::Create({.endpoints = {"etcd"}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(EtcdClient::Create({.endpoints = {"http://127.0.0.1:2379/", "etcd-2:2379"}}).ok());

  EtcdRegistryOptions o;
  o.etcd.endpoints = {"127.0.0.1:1"};
  o.prefix = "kvt";
  EXPECT_THAT(EtcdRegistry::Start(o, Record("x", "h:1")).status().message(), HasSubstr("prefix must start"));
  o.prefix = "/kvt";
  o.ttl = absl::Seconds(1);
  EXPECT_THAT(EtcdRegistry::Start(o, Record("x", "h:1")).status().message(), HasSubstr("at least 2 s"));
  o.ttl = absl::Seconds(5);
  EXPECT_EQ(EtcdRegistry::Start(o, Record("x y", "h:1")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefixRangeEnd("/kvt/daemons/"), "/kvt/daemons0");
}

TEST(StaticPeerResolverTest, AddressesPassAndIdsSayHowToEnableThem) {
  StaticPeerResolver resolver;
  EXPECT_EQ(*resolver.Resolve("10.1.2.3:7470"), "10.1.2.3:7470");
  EXPECT_EQ(*resolver.Resolve("[::1]:7470"), "[::1]:7470");
  const auto id = resolver.Resolve("decode-0");
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), HasSubstr("--etcd_endpoints"));
  EXPECT_EQ(resolver.Resolve(":7470").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsHostPort("h:1"));
  EXPECT_FALSE(IsHostPort("h:"));
  EXPECT_FALSE(IsHostPort("decode-0"));
}

}  // namespace
}  // namespace kvt::server
