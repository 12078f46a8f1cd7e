// Whether the prefill daemons this daemon receives from are still alive, checked on the control plane: a request
// opened but with no chunk in flight yet is bound to no data-plane link, so a prefill daemon that dies then would
// otherwise be noticed only at the request's deadline. Each watched address is pinged (its Hello) every
// `interval`; `misses` failed pings in a row mark it dead. Thread-safe; one pinging thread.
#ifndef KVT_SERVER_PEER_LIVENESS_H_
#define KVT_SERVER_PEER_LIVENESS_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/kvt/v1/peer.grpc.pb.h"
#include "server/peer_directory.h"
#include "server/peer_security.h"

namespace kvt::server {

class PeerLiveness {
 public:
  // `directory` (for our Hello) and `security` must outlive this object.
  PeerLiveness(const PeerDirectory* directory, const PeerSecurity* security,
               absl::Duration interval = absl::Milliseconds(500), int misses = 3);
  ~PeerLiveness();

  // Starts (or keeps) watching `address` for one more user; Unwatch drops one.
  void Watch(const std::string& address);
  void Unwatch(const std::string& address);
  // True once `address` missed `misses` pings in a row (it stays dead until a ping succeeds again).
  bool Dead(const std::string& address) const;

 private:
  struct Target {
    int users = 0;
    int missed = 0;
    std::unique_ptr<v1::KvtPeer::Stub> stub;
  };
  void Run();

  const PeerDirectory* const directory_;
  const PeerSecurity* const security_;
  const absl::Duration interval_;
  const int misses_;

  mutable kvt::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Target>> targets_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_PEER_LIVENESS_H_
