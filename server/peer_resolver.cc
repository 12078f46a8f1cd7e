#include "server/peer_resolver.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvt::server {

bool IsHostPort(absl::string_view name) {
  const size_t colon = name.rfind(':');
  return colon != absl::string_view::npos && colon > 0 && colon + 1 < name.size();
}

absl::Status CheckDaemonId(absl::string_view id, absl::string_view field) {
  if (id.empty() || id.size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be 1..128 bytes, got ", id.size()));
  }
  for (const char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(field, " \"", id, "\" may hold only letters, digits, '.', '_' "
                                                     "and '-' (or be host:port)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> StaticPeerResolver::Resolve(absl::string_view name) {
  if (IsHostPort(name) && name.size() <= 255) return std::string(name);
  if (absl::Status s = CheckDaemonId(name, "peer"); !s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", name, "\" is a daemon id, and this kvtd has no registry to look ids up in: give host:port, or start "
      "kvtd with --etcd_endpoints"));
}

}  // namespace kvt::server
