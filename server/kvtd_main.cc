// kvtd: the kvt sidecar daemon. Flags -> DaemonOptions -> Daemon; runs until SIGINT or SIGTERM.
//   kvtd --role=decode --client_socket=/run/kvt/decode.sock --peer_listen=0.0.0.0:7470 --rate_gbps=25
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/daemon.h"
#include "server/etcd_client.h"
#include "transport/options.h"

ABSL_FLAG(std::string, role, "both", "prefill, decode or both");
ABSL_FLAG(std::string, daemon_id, "", "this daemon's name for peers and logs (default: <hostname>-<pid>)");
ABSL_FLAG(std::string, client_socket, "/tmp/kvtd.sock", "unix socket for clients (kvt::Client, kvtctl)");
ABSL_FLAG(std::string, client_socket_mode, "0660", "permissions of the client socket, in octal (e.g. 0600)");
ABSL_FLAG(std::string, peer_listen, "0.0.0.0:7470", "host:port of the daemon-to-daemon service (port 0 = any)");
ABSL_FLAG(std::string, advertise_address, "", "host:port peers use to reach this daemon (default: from --peer_listen)");
ABSL_FLAG(std::vector<std::string>, etcd_endpoints, {},
          "etcd client endpoints (host:port or http://host:port, comma-separated): register this daemon there and "
          "let clients name peers by daemon id (\"\" = peers by host:port only)");
ABSL_FLAG(std::string, etcd_prefix, "/kvt", "etcd key prefix; the daemon's key is <prefix>/daemons/<daemon_id>");
ABSL_FLAG(int, etcd_ttl_s, 10, "etcd lease in seconds: how long a daemon that died stays listed");
ABSL_FLAG(std::string, etcd_ca, "", "PEM CA of etcd's certificate: talk TLS to etcd (https:// endpoints)");
ABSL_FLAG(std::string, etcd_cert, "", "PEM client certificate for etcd's --client-cert-auth (with --etcd_key)");
ABSL_FLAG(std::string, etcd_key, "", "PEM private key of --etcd_cert");
ABSL_FLAG(std::string, etcd_user, "", "etcd user, when etcd has authentication enabled (with --etcd_password_file)");
ABSL_FLAG(std::string, etcd_password_file, "", "file holding --etcd_user's password (its first line)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9470", "host:port for Prometheus /metrics (\"\" = off)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate for mutual TLS between daemons (with --tls_key, --tls_ca)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificate that signs every daemon's certificate");
ABSL_FLAG(std::string, tls_server_name, "", "name expected in peers' certificates (default: the dialled host)");
ABSL_FLAG(std::string, peer_token_file, "", "file holding a shared token every peer call must carry");
ABSL_FLAG(double, rate_gbps, 0, "data-plane rate limit per peer link in Gbit/s (0 = unlimited)");
ABSL_FLAG(std::string, ucx_tls, "tcp", "UCX transports for the data plane (UCX_TLS syntax: tcp, shm, sm,cma, rc,ud)");
ABSL_FLAG(std::string, ucx_net_devices, "", "UCX network devices (\"\" = all)");
ABSL_FLAG(int, ucx_workers, 0,
          "UCX workers (each with a progress thread) a peer link stripes its chunks over, 1..16 (0 = a quarter of "
          "the cores, 1 to 4)");
ABSL_FLAG(uint32_t, chunk_kib, 512, "data-plane chunk size in KiB (bounds how long an anchor waits)");
ABSL_FLAG(int, codec_threads, 0, "threads encoding and decoding pages (0 = one per core)");
ABSL_FLAG(int64_t, staging_mib, 4096,
          "MiB of one request's encoded layers held while on the wire (cover a whole request, or later layers' anchors "
          "wait for earlier layers' residuals)");
ABSL_FLAG(int64_t, host_buffer_pool_mib, 4096,
          "MiB of host buffers (pinned for GPU regions) kept between requests for encoded layers and inboxes");
ABSL_FLAG(
    uint32_t, page_tokens, 0,
    "tokens per codec page (0: sized by the region's channels, 1024 to 8192 tokens; docs/DAEMON.md, \"Page size\")");
ABSL_FLAG(int, max_requests, 256, "live requests at once");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off");
ABSL_FLAG(std::string, ready_file, "", "write a JSON file with the bound addresses once up (for scripts and tests)");

namespace {

absl::StatusOr<kvt::server::DaemonOptions> OptionsFromFlags() {
  kvt::server::DaemonOptions o;
  absl::StatusOr<kvt::server::Role> role = kvt::server::ParseRole(absl::GetFlag(FLAGS_role));
  if (!role.ok()) return role.status();
  o.role = *role;
  o.daemon_id = absl::GetFlag(FLAGS_daemon_id);
  o.client_socket = absl::GetFlag(FLAGS_client_socket);
  const std::string mode = absl::GetFlag(FLAGS_client_socket_mode);
  char* end = nullptr;
  const unsigned long parsed = mode.empty() ? 01000 : std::strtoul(mode.c_str(), &end, 8);
  if (mode.empty() || *end != '\0' || parsed > 0777) {
    return absl::InvalidArgumentError(
        absl::StrCat("--client_socket_mode must be octal permissions 0..0777, e.g. 0660; got \"", mode, "\""));
  }
  o.client_socket_mode = static_cast<uint32_t>(parsed);
  o.peer_listen = absl::GetFlag(FLAGS_peer_listen);
  o.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  for (const std::string& endpoint : absl::GetFlag(FLAGS_etcd_endpoints)) {
    if (!endpoint.empty()) o.etcd_endpoints.push_back(endpoint);
  }
  o.etcd_prefix = absl::GetFlag(FLAGS_etcd_prefix);
  o.etcd_ttl = absl::Seconds(absl::GetFlag(FLAGS_etcd_ttl_s));
  o.etcd_ca_file = absl::GetFlag(FLAGS_etcd_ca);
  o.etcd_cert_file = absl::GetFlag(FLAGS_etcd_cert);
  o.etcd_key_file = absl::GetFlag(FLAGS_etcd_key);
  o.etcd_username = absl::GetFlag(FLAGS_etcd_user);
  if (const std::string path = absl::GetFlag(FLAGS_etcd_password_file); !path.empty()) {
    absl::StatusOr<std::string> password = kvt::server::ReadEtcdPassword(path);
    if (!password.ok()) {
      std::fprintf(stderr, "kvtd: --etcd_password_file: %s\n", std::string(password.status().message()).c_str());
      std::exit(2);
    }
    o.etcd_password = *std::move(password);
  }
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  o.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  const std::string token_file = absl::GetFlag(FLAGS_peer_token_file);
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read --peer_token_file ", token_file));
    std::getline(in, o.peer_token);
    if (o.peer_token.empty()) return absl::InvalidArgumentError(absl::StrCat(token_file, " holds an empty token"));
  }
  const double gbps = absl::GetFlag(FLAGS_rate_gbps);
  if (gbps < 0) return absl::InvalidArgumentError("--rate_gbps must be >= 0");
  o.transport.rate_bytes_per_second = gbps * 1e9 / 8;
  o.transport.ucx_tls = absl::GetFlag(FLAGS_ucx_tls);
  o.transport.ucx_net_devices = absl::GetFlag(FLAGS_ucx_net_devices);
  const int workers = absl::GetFlag(FLAGS_ucx_workers);
  if (workers < 0 || workers > kvt::transport::kMaxUcxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat("--ucx_workers must be in [0, ", kvt::transport::kMaxUcxWorkers, "]"));
  }
  o.transport.ucx_workers =
      workers > 0 ? workers : kvt::transport::DefaultUcxWorkers(static_cast<int>(std::thread::hardware_concurrency()));
  KVT_ASSIGN_OR_RETURN(o.transport.chunk_bytes,
                       kvt::transport::ChunkBytesFromKib(absl::GetFlag(FLAGS_chunk_kib), "--chunk_kib"));
  o.codec_threads = absl::GetFlag(FLAGS_codec_threads);
  if (absl::GetFlag(FLAGS_host_buffer_pool_mib) < 0) {
    return absl::InvalidArgumentError("--host_buffer_pool_mib must be >= 0");
  }
  o.host_buffer_pool_bytes = absl::GetFlag(FLAGS_host_buffer_pool_mib) << 20;
  if (absl::GetFlag(FLAGS_staging_mib) < 1) return absl::InvalidArgumentError("--staging_mib must be >= 1");
  o.staging_bytes_per_request = absl::GetFlag(FLAGS_staging_mib) << 20;
  o.page_tokens = absl::GetFlag(FLAGS_page_tokens);
  o.max_requests = absl::GetFlag(FLAGS_max_requests);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kvtd: the kvt sidecar daemon (see README.md). Runs until SIGINT/SIGTERM.");
  absl::ParseCommandLine(argc, argv);
  if (!kvt::SetLogLevel(absl::GetFlag(FLAGS_log_level))) {
    std::fprintf(stderr, "kvtd: unknown --log_level\n");
    return 2;
  }
  // Block the stop signals before any thread starts, so sigwait below is the one that takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<kvt::server::DaemonOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "kvtd: %s\n", options.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<kvt::server::Daemon>> daemon = kvt::server::Daemon::Start(*options);
  if (!daemon.ok()) {
    std::fprintf(stderr, "kvtd: cannot start: %s\n", daemon.status().ToString().c_str());
    return 1;
  }
  const std::string ready_file = absl::GetFlag(FLAGS_ready_file);
  if (!ready_file.empty()) {
    nlohmann::json ready = {{"daemon_id", (*daemon)->daemon_id()},
                            {"pid", getpid()},
                            {"client_socket", (*daemon)->client_socket()},
                            {"peer_address", (*daemon)->peer_address()},
                            {"metrics_port", (*daemon)->metrics_port()}};
    const std::string tmp = ready_file + ".tmp";
    std::ofstream(tmp) << ready.dump() << "\n";
    if (std::rename(tmp.c_str(), ready_file.c_str()) != 0) {
      std::fprintf(stderr, "kvtd: cannot write --ready_file %s\n", ready_file.c_str());
      return 1;
    }
  }
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  kvt::Logger("server")->info("signal {}: shutting down", signal_number);
  daemon->reset();
  return 0;
}
