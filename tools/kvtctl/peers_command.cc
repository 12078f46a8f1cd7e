#include "tools/kvtctl/peers_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/etcd_registry.h"
#include "tools/kvtctl/flag_set.h"

namespace kvt::kvtctl {
namespace {

constexpr char kPeersUsage[] =
    "Usage: kvtctl peers --etcd HOST:PORT[,HOST:PORT...] [--prefix /kvt] [--etcd-ca CA --etcd-cert C --etcd-key K]\n"
    "                    [--json]\n"
    "  the kvtd daemons registered in etcd (kvtd --etcd_endpoints): id, role, peer address, data plane.\n";

int RunPeers(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "peers";
  std::vector<std::string> endpoints;
  std::string prefix = "/kvt";
  server::EtcdOptions etcd_options;
  bool json = false;
  FlagSet flags("kvtctl peers");
  flags.Strings("etcd", &endpoints, "etcd client endpoints, comma-separated (as kvtd --etcd_endpoints)");
  flags.String("prefix", &prefix, "the daemons' etcd prefix (kvtd --etcd_prefix)");
  flags.String("etcd-ca", &etcd_options.ca_file, "PEM CA of etcd's certificate (TLS, as kvtd --etcd_ca)");
  flags.String("etcd-cert", &etcd_options.cert_file, "PEM client certificate (as kvtd --etcd_cert)");
  flags.String("etcd-key", &etcd_options.key_file, "PEM key of --etcd-cert (as kvtd --etcd_key)");
  std::string password_file;
  flags.String("etcd-user", &etcd_options.username, "etcd user (etcd with authentication; as kvtd --etcd_user)");
  flags.String("etcd-password-file", &password_file, "file holding --etcd-user's password (its first line)");
  flags.Bool("json", &json, "print one JSON document instead of the table");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kPeersUsage)) return *exit;
  if (endpoints.empty()) return UsageError(io, cmd, "where is etcd? give --etcd HOST:PORT", flags.Usage());
  etcd_options.endpoints = endpoints;
  if (!password_file.empty()) {
    absl::StatusOr<std::string> password = server::ReadEtcdPassword(password_file);
    if (!password.ok()) return UsageError(io, cmd, std::string(password.status().message()), flags.Usage());
    etcd_options.password = *std::move(password);
  }
  absl::StatusOr<std::unique_ptr<server::EtcdClient>> etcd = server::EtcdClient::Create(etcd_options);
  if (!etcd.ok()) return UsageError(io, cmd, std::string(etcd.status().message()), flags.Usage());
  absl::StatusOr<std::vector<v1::DaemonRecord>> daemons = server::ListDaemons(**etcd, prefix);
  if (!daemons.ok()) return Failure(io, cmd, daemons.status());
  if (!json) {
    io.out << FormatPeers(*daemons, absl::ToUnixMillis(absl::Now()));
    return kExitOk;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const v1::DaemonRecord& d : *daemons) {
    out.push_back({{"daemon_id", d.daemon_id()},
                   {"role", d.role()},
                   {"peer_address", d.peer_address()},
                   {"data_plane", d.data_plane()},
                   {"schemes", std::vector<std::string>(d.schemes().begin(), d.schemes().end())},
                   {"container_version", d.container_version()},
                   {"protocol_version", d.protocol_version()},
                   {"started_unix_ms", d.started_unix_ms()}});
  }
  io.out << nlohmann::json{{"prefix", prefix}, {"daemons", out}}.dump(2) << "\n";
  return kExitOk;
}

}  // namespace

std::string FormatPeers(const std::vector<v1::DaemonRecord>& daemons, int64_t now_unix_ms) {
  if (daemons.empty()) return "no daemons registered\n";
  std::string out = absl::StrFormat("%-24s %-8s %-22s %-18s %-9s %s\n", "daemon", "role", "peer address",
                                    "data plane", "container", "up");
  for (const v1::DaemonRecord& d : daemons) {
    const double up_s = d.started_unix_ms() > 0 ? (now_unix_ms - d.started_unix_ms()) / 1000.0 : 0.0;
    absl::StrAppendFormat(&out, "%-24s %-8s %-22s %-18s v%-8u %.0f s\n", d.daemon_id(), d.role(), d.peer_address(),
                          d.data_plane(), d.container_version(), up_s);
  }
  return out;
}

CommandGroup PeersCommandGroup() {
  return {"peers", "the kvtd daemons registered in etcd (kvtd --etcd_endpoints)", RunPeers};
}

}  // namespace kvt::kvtctl
