#include "server/options.h"

#include "server/peer_resolver.h"

#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kvt::server {
namespace {

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-' || c == ':' || c == '/';
}

absl::Status ValidateHostPort(absl::string_view value, absl::string_view field, bool allow_empty) {
  if (value.empty()) {
    return allow_empty ? absl::OkStatus()
                       : absl::InvalidArgumentError(absl::StrCat(field, " must be host:port, got nothing"));
  }
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == value.size()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be host:port, got \"", value, "\""));
  }
  int port = 0;
  for (char c : value.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(field, " has a bad port in \"", value, "\""));
    }
    port = port * 10 + (c - '0');
  }
  if (port > 65535) return absl::InvalidArgumentError(absl::StrCat(field, " port out of range in \"", value, "\""));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  if (name == "prefill") return Role::kPrefill;
  if (name == "decode") return Role::kDecode;
  if (name == "both") return Role::kBoth;
  return absl::InvalidArgumentError(absl::StrCat("unknown role \"", name, "\"; use prefill, decode or both"));
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kPrefill:
      return "prefill";
    case Role::kDecode:
      return "decode";
    case Role::kBoth:
      return "both";
  }
  return "?";
}

absl::Status ValidateId(absl::string_view id, absl::string_view what, size_t max_bytes) {
  if (id.empty() || id.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be 1..%d bytes, got %d", std::string(what), max_bytes, id.size()));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (!IdChar(id[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s has a character outside [A-Za-z0-9._:/-] at byte %d", std::string(what), i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> DeadlineFromMs(uint32_t ms, const char* field) {
  if (ms < 1 || ms > 3600000) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be 1..3600000 milliseconds, got ", ms));
  }
  return absl::Milliseconds(ms);
}

absl::StatusOr<DaemonOptions> ValidateOptions(DaemonOptions o) {
  if (o.daemon_id.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    o.daemon_id = absl::StrCat(host[0] != '\0' ? host : "kvtd", "-", getpid());
  }
  KVT_RETURN_IF_ERROR(ValidateId(o.daemon_id, "daemon_id", 128));
  if (o.client_socket.empty() || o.client_socket.size() > 100) {
    return absl::InvalidArgumentError("client_socket must be a path of 1..100 bytes (a unix socket's limit)");
  }
  if (o.client_socket_mode > 0777) return absl::InvalidArgumentError("client_socket_mode must be <= 0777");
  KVT_RETURN_IF_ERROR(ValidateHostPort(o.peer_listen, "peer_listen", false));
  KVT_RETURN_IF_ERROR(ValidateHostPort(o.advertise_address, "advertise_address", true));
  KVT_RETURN_IF_ERROR(ValidateHostPort(o.metrics_listen, "metrics_listen", true));
  const int tls_given = !o.tls_cert_file.empty() + !o.tls_key_file.empty() + !o.tls_ca_file.empty();
  if (tls_given != 0 && tls_given != 3) {
    return absl::InvalidArgumentError("tls_cert_file, tls_key_file and tls_ca_file go together: give all or none");
  }
  if (o.codec_threads < 0 || o.codec_threads > 1024) {
    return absl::InvalidArgumentError("codec_threads must be 0 (one per core) .. 1024");
  }
  if (o.codec_threads == 0) o.codec_threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.page_tokens > 65536) return absl::InvalidArgumentError("page_tokens must be 0..65536 (0: sized by the region's channels)");
  if (o.chunk_tokens < 0 || o.chunk_tokens > 256) {
    return absl::InvalidArgumentError("chunk_tokens must be 1..256, or 0 for each scheme's own (lynx 16, int8/int4 32)");
  }
  if (o.host_buffer_pool_bytes < 0) return absl::InvalidArgumentError("host_buffer_pool_bytes must be >= 0");
  if (o.staging_bytes_per_request < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("staging_bytes_per_request must be at least 1 MiB");
  }
  if (o.max_requests < 1 || o.max_requests > 1000000) {
    return absl::InvalidArgumentError("max_requests must be 1..1000000");
  }
  if (o.finished_keep < 0) return absl::InvalidArgumentError("finished_keep must be >= 0");
  if (o.finished_retention < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("finished_retention must be >= 0");
  }
  if (o.peer_connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("peer_connect_timeout must be positive");
  }
  KVT_ASSIGN_OR_RETURN(o.transport, transport::ValidateOptions(o.transport));
  if (!o.etcd_endpoints.empty()) {
    // etcd keys and peers name this daemon by its id: it must be one they can carry.
    KVT_RETURN_IF_ERROR(CheckDaemonId(o.daemon_id, "--daemon_id"));
    if (o.etcd_prefix.empty() || o.etcd_prefix.front() != '/' || o.etcd_prefix.back() == '/') {
      return absl::InvalidArgumentError(absl::StrCat("--etcd_prefix must start with '/' and not end with one, got \"",
                                                     o.etcd_prefix, "\""));
    }
    if (o.etcd_username.empty() != o.etcd_password.empty()) {
      return absl::InvalidArgumentError("--etcd_user and --etcd_password_file go together");
    }
    if (o.etcd_ttl < absl::Seconds(2) || o.etcd_ttl > absl::Hours(1)) {
      return absl::InvalidArgumentError("--etcd_ttl_s must be 2..3600 seconds");
    }
  }
  return o;
}

}  // namespace kvt::server
