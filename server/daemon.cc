#include "server/daemon.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/container.h"
#include "codec/scheme.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/gpu_region_codec.h"
#include "transport/ucx/ucx_transport.h"

namespace kvt::server {
namespace {

// Whether a daemon answers on the unix socket at `path` (a stale file from a dead one does not).
bool SocketIsLive(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

std::string HostOf(const std::string& host_port) { return host_port.substr(0, host_port.rfind(':')); }

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  KVT_ASSIGN_OR_RETURN(options, ValidateOptions(std::move(options)));
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(options)));
  KVT_RETURN_IF_ERROR(daemon->Init());
  return daemon;
}

absl::Status Daemon::Init() {
  // Both gRPC servers answer grpc.health.v1.Health (set before either is built).
  grpc::EnableDefaultHealthCheckService(true);
  MetricsOptions metrics_options;
  metrics_options.listen = options_.metrics_listen;
  KVT_ASSIGN_OR_RETURN(metrics_, DaemonMetrics::Create(metrics_options));
  KVT_ASSIGN_OR_RETURN(transport_, transport::NewUcxTransport(options_.transport));
  PeerSecurityOptions security;
  security.cert_file = options_.tls_cert_file;
  security.key_file = options_.tls_key_file;
  security.ca_file = options_.tls_ca_file;
  security.server_name = options_.tls_server_name;
  security.token = options_.peer_token;
  KVT_ASSIGN_OR_RETURN(PeerSecurity loaded, PeerSecurity::Load(security));
  security_ = std::make_unique<PeerSecurity>(std::move(loaded));
  LocalIdentity self;
  self.daemon_id = options_.daemon_id;
  self.data_address = transport_->address();
  self.schemes = codec::StandardSchemeNames();
  self.container_version = codec::kContainerVersion;
  peers_ = std::make_unique<PeerDirectory>(std::move(self), security_.get(), transport_.get());
  liveness_ = std::make_unique<PeerLiveness>(peers_.get(), security_.get());
  workers_ = std::make_unique<WorkerPool>(options_.codec_threads, options_.transport.starvation_bound, "kvt-codec");
  device_workers_ = std::make_unique<WorkerPool>(kMaxGpuSlots, options_.transport.starvation_bound, "kvt-device");
  buffers_ = HostBufferPool::Create({.max_kept_bytes = static_cast<size_t>(options_.host_buffer_pool_bytes)});
  // Lynx's quantizer tables for the default alpha, built in the background now rather than by the first request.
  // A build takes tens of ms; the first lynx request used to wait ~100 ms (H100 host) to ~200 ms (2 cores), its
  // workers building a copy each.
  workers_->Submit([] {
    for (const char* name : {"lynx", "lynx4"}) {
      absl::StatusOr<codec::Scheme> scheme = codec::ParseScheme(name);
      const absl::Status s = scheme.ok() ? codec::PrepareCodec(*scheme) : scheme.status();
      if (!s.ok()) Logger("server")->warn("preparing the {} codec: {}", name, s.ToString());
    }
  });
  book_ = std::make_unique<RequestBook>(options_.max_requests, options_.finished_keep, options_.finished_retention);
  regions_ = std::make_unique<RegionRegistry>();
  context_.options = &options_;
  context_.regions = regions_.get();
  context_.transport = transport_.get();
  context_.peers = peers_.get();
  context_.liveness = liveness_.get();
  context_.workers = workers_.get();
  context_.device_workers = device_workers_.get();
  context_.buffers = buffers_.get();
  context_.book = book_.get();
  context_.metrics = metrics_.get();
  if (options_.role != Role::kDecode) prefill_ = std::make_unique<PrefillSide>(&context_);
  if (options_.role != Role::kPrefill) decode_ = std::make_unique<DecodeSide>(&context_);
  // Peers before clients: the peer port is part of the address an Offer advertises.
  KVT_RETURN_IF_ERROR(StartPeerServer());
  KVT_RETURN_IF_ERROR(StartRegistry());
  KVT_RETURN_IF_ERROR(StartClientServer());
  sync_thread_ = std::thread([this] {
    while (!stop_sync_.WaitForNotificationWithTimeout(absl::Seconds(1))) SyncGauges();
  });
  Logger("server")->info("kvtd {} up: role {}, clients on {}, peers on {}, data plane {} ({}), metrics {}",
                         options_.daemon_id, RoleName(options_.role), options_.client_socket,
                         context_.advertise_address, transport_->capabilities().name,
                         transport_->capabilities().transports,
                         metrics_->port() > 0 ? absl::StrCat(":", metrics_->port()) : std::string("off"));
  return absl::OkStatus();
}

absl::Status Daemon::StartPeerServer() {
  peer_service_ = std::make_unique<PeerService>(&context_, security_.get(), prefill_.get(), decode_.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.peer_listen, security_->ServerCredentials(), &port);
  builder.RegisterService(peer_service_.get());
  peer_server_ = builder.BuildAndStart();
  if (peer_server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for peers on ", options_.peer_listen,
                                               ": the port is taken or the address is not local; pick another "
                                               "--peer_listen (port 0 picks a free one)"));
  }
  std::string host = HostOf(options_.advertise_address.empty() ? options_.peer_listen : options_.advertise_address);
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = "127.0.0.1";
  context_.advertise_address =
      options_.advertise_address.empty() ? absl::StrCat(host, ":", port) : options_.advertise_address;
  return absl::OkStatus();
}

absl::Status Daemon::StartRegistry() {
  if (options_.etcd_endpoints.empty()) {
    resolver_ = std::make_unique<StaticPeerResolver>();
  } else {
    EtcdRegistryOptions etcd;
    etcd.etcd.endpoints = options_.etcd_endpoints;
    etcd.etcd.ca_file = options_.etcd_ca_file;
    etcd.etcd.cert_file = options_.etcd_cert_file;
    etcd.etcd.key_file = options_.etcd_key_file;
    etcd.etcd.username = options_.etcd_username;
    etcd.etcd.password = options_.etcd_password;
    etcd.prefix = options_.etcd_prefix;
    etcd.ttl = options_.etcd_ttl;
    v1::DaemonRecord self;
    self.set_daemon_id(options_.daemon_id);
    self.set_role(RoleName(options_.role));
    self.set_peer_address(context_.advertise_address);
    self.set_data_plane(absl::StrCat(transport_->capabilities().name, " (", transport_->capabilities().transports,
                                     ")"));
    for (const std::string& scheme : codec::StandardSchemeNames()) self.add_schemes(scheme);
    self.set_container_version(codec::kContainerVersion);
    self.set_protocol_version(kPeerProtocolVersion);
    self.set_started_unix_ms(absl::ToUnixMillis(absl::Now()));
    KVT_ASSIGN_OR_RETURN(std::unique_ptr<EtcdRegistry> registry, EtcdRegistry::Start(etcd, std::move(self)));
    etcd_ = registry.get();
    resolver_ = std::move(registry);
  }
  context_.resolver = resolver_.get();
  return absl::OkStatus();
}

absl::Status Daemon::StartClientServer() {
  const std::string& path = options_.client_socket;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(absl::StrCat("client socket path ", path, " exists and is not a socket"));
    }
    if (SocketIsLive(path)) {
      return absl::AlreadyExistsError(absl::StrCat("another daemon already serves ", path,
                                                   "; stop it or choose another --client_socket"));
    }
    unlink(path.c_str());  // a stale socket of a daemon that died
  }
  client_service_ = std::make_unique<ClientService>(&context_, prefill_.get(), decode_.get());
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("unix:", path), grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(client_service_.get());
  client_server_ = builder.BuildAndStart();
  if (client_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on unix socket ", path,
                                               "; check that its directory exists and is writable"));
  }
  if (chmod(path.c_str(), options_.client_socket_mode) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("chmod ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void Daemon::SyncGauges() {
  const transport::TransportStats t = transport_->stats();
  // The data plane keeps running totals; the metrics take increases.
  const std::array<std::pair<const char*, uint64_t>, 5> rejected = {{{"malformed", t.rejected_malformed},
                                                                      {"bad_crc", t.rejected_bad_crc},
                                                                      {"unknown_transfer", t.rejected_unknown_transfer},
                                                                      {"out_of_bounds", t.rejected_out_of_bounds},
                                                                      {"over_window", t.rejected_over_window}}};
  for (size_t i = 0; i < rejected.size(); ++i) {
    if (rejected[i].second > rejected_seen_[i]) {
      metrics_->ChunksRejected(rejected[i].first, rejected[i].second - rejected_seen_[i]);
      rejected_seen_[i] = rejected[i].second;
    }
  }
  int live_prefill = 0;
  int live_decode = 0;
  for (const auto& r : book_->Live()) (r->side == Side::kPrefill ? live_prefill : live_decode)++;
  metrics_->SetInFlight(Side::kPrefill, live_prefill);
  metrics_->SetInFlight(Side::kDecode, live_decode);
  metrics_->SetQueueDepth("codec_tasks", static_cast<int64_t>(workers_->queued()));
}

Daemon::~Daemon() {
  // Stop taking calls (bounded: in-flight calls get a short grace), then end live requests, then the rest.
  // Out of etcd first: peers stop resolving this daemon at once instead of when its lease would expire.
  if (etcd_ != nullptr) etcd_->Stop();
  const auto grace = absl::ToChronoTime(absl::Now() + absl::Seconds(1));
  if (client_server_ != nullptr) client_server_->Shutdown(grace);
  if (peer_server_ != nullptr) peer_server_->Shutdown(grace);
  stop_sync_.Notify();
  if (sync_thread_.joinable()) sync_thread_.join();
  prefill_.reset();
  decode_.reset();
  device_workers_.reset();  // runs queued GPU decodes (which skip finished requests) and joins
  workers_.reset();
  if (client_server_ != nullptr) unlink(options_.client_socket.c_str());
  client_server_.reset();
  peer_server_.reset();
  transport_.reset();
}

}  // namespace kvt::server
