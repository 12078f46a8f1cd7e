// How a daemon turns the name a client gives for a peer (Offer.decode_daemon) into the address of that peer's
// KvtPeer service: "host:port" is an address already; anything else is a daemon id (kvtd --daemon_id), looked up
// in a registry. StaticPeerResolver has none (addresses only); EtcdRegistry (etcd_registry.h) looks ids up in
// etcd. A new discovery source implements this interface and is chosen in Daemon::Init. Thread-safe.
#ifndef KVT_SERVER_PEER_RESOLVER_H_
#define KVT_SERVER_PEER_RESOLVER_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace kvt::server {

// Whether `name` has the form host:port (a ':' with something on both sides) rather than a daemon id.
bool IsHostPort(absl::string_view name);

// INVALID_ARGUMENT unless `id` is a daemon id kvtd accepts: 1..128 bytes of [A-Za-z0-9._-].
absl::Status CheckDaemonId(absl::string_view id, absl::string_view field);

class PeerResolver {
 public:
  virtual ~PeerResolver() = default;
  // The peer-service address for `name`. INVALID_ARGUMENT for a name that is neither form; NOT_FOUND for a
  // daemon id nobody registered; UNAVAILABLE when the registry cannot be asked and the id is not cached.
  virtual absl::StatusOr<std::string> Resolve(absl::string_view name) = 0;
};

// Addresses only: a daemon id is refused with a message saying how to enable ids (--etcd_endpoints).
class StaticPeerResolver final : public PeerResolver {
 public:
  absl::StatusOr<std::string> Resolve(absl::string_view name) override;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_PEER_RESOLVER_H_
