// This daemon's connections to other daemons, by peer-service address: a gRPC channel to the peer's KvtPeer
// service (authenticated as PeerSecurity says), the Hello exchange, and the data-plane link to its transport.
// Connections are dialled on first use and cached; one that failed is forgotten so the next use re-dials.
// Thread-safe.
#ifndef KVT_SERVER_PEER_DIRECTORY_H_
#define KVT_SERVER_PEER_DIRECTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "absl/time/time.h"
#include "proto/kvt/v1/peer.grpc.pb.h"
#include "server/peer_security.h"
#include "transport/transport.h"

namespace kvt::server {

inline constexpr uint32_t kPeerProtocolVersion = 1;

// One dialled peer. Immutable once made.
struct PeerConnection {
  std::string address;    // as dialled, "host:port"
  std::string daemon_id;  // from its Hello
  std::vector<std::string> schemes;
  std::unique_ptr<v1::KvtPeer::Stub> stub;
  transport::PeerId data_peer = 0;
};

// What this daemon says in Hello.
struct LocalIdentity {
  std::string daemon_id;
  std::string data_address;  // transport::Transport::address()
  std::vector<std::string> schemes;
  uint32_t container_version = 0;
};

class PeerDirectory {
 public:
  // `transport` and `security` must outlive the directory.
  PeerDirectory(LocalIdentity self, const PeerSecurity* security, transport::Transport* transport);

  // The connection to `address`, dialling it (gRPC, Hello, data-plane Connect) if needed, all within `timeout`.
  // UNAVAILABLE when the peer cannot be reached; FAILED_PRECONDITION when its protocol or container version
  // differs; UNAUTHENTICATED when it refused our credentials.
  absl::StatusOr<std::shared_ptr<const PeerConnection>> Dial(const std::string& address, absl::Duration timeout);
  // Drops a cached connection (after a data-plane failure) so the next Dial makes a new one.
  void Forget(const std::string& address);

  // Tells the daemon at `address` to stop request `request_id` because of `why` (its CancelTransfer), best effort
  // and bounded (about 3 s): a peer that cannot be reached is gone, and its own failure detection covers it.
  void CancelOnPeer(const std::string& address, const std::string& request_id, const absl::Status& why);

  // Prepares a context for a call to a peer: deadline and credentials.
  void PrepareCall(grpc::ClientContext* context, absl::Time deadline) const;

  const LocalIdentity& self() const { return self_; }
  // Checks a peer's Hello and builds our answer (server side of Hello).
  absl::StatusOr<v1::HelloResponse> Answer(const v1::HelloRequest& request) const;

 private:
  const LocalIdentity self_;
  const PeerSecurity* const security_;
  transport::Transport* const transport_;

  kvt::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const PeerConnection>> peers_ ABSL_GUARDED_BY(mu_);
  // Serializes dials so two requests to a new peer make one connection.
  kvt::Mutex dial_mu_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_PEER_DIRECTORY_H_
