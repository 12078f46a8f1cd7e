// kvtd in etcd (docs/DAEMON.md, "Finding peers through etcd"): the daemon's DaemonRecord under
// <prefix>/daemons/<daemon_id>, on a lease it keeps alive (a daemon that dies disappears when the lease expires;
// one that stops revokes it at once), and daemon ids resolved to peer addresses from a cache that a watch on
// <prefix>/daemons/ keeps current. When etcd is unreachable, registration retries in the background and cached
// ids keep resolving; an id not in the cache is UNAVAILABLE until etcd is back. A registration that failed is
// retried every 500 ms. Thread-safe.
#ifndef KVT_SERVER_ETCD_REGISTRY_H_
#define KVT_SERVER_ETCD_REGISTRY_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/kvt/v1/registry.pb.h"
#include "server/etcd_client.h"
#include "server/peer_resolver.h"

namespace kvt::server {

struct EtcdRegistryOptions {
  EtcdOptions etcd;
  std::string prefix = "/kvt";           // keys live under <prefix>/daemons/
  absl::Duration ttl = absl::Seconds(10);  // the lease: how long a dead daemon stays listed
};

// The key of daemon `id` under `prefix`.
std::string DaemonKey(const std::string& prefix, const std::string& id);

// Every daemon registered under `prefix`, in id order (kvtctl peers). Values that do not parse are skipped.
absl::StatusOr<std::vector<v1::DaemonRecord>> ListDaemons(EtcdClient& etcd, const std::string& prefix);

class EtcdRegistry final : public PeerResolver {
 public:
  // Registers `self` (trying for up to the etcd call timeout; if etcd is not reachable yet, the daemon starts
  // anyway and the keep-alive thread retries every 500 ms) and starts the keep-alive and watch threads.
  // INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<EtcdRegistry>> Start(EtcdRegistryOptions options, v1::DaemonRecord self);
  ~EtcdRegistry() override;

  absl::StatusOr<std::string> Resolve(absl::string_view name) override;

  // Revokes the lease (peers stop resolving this daemon at once) and stops the threads. Idempotent.
  void Stop();
  // Stops the threads without revoking, as a killed daemon would: the entry lasts until its lease expires (tests).
  void Abandon();
  // The daemon ids the watch has seen, in order (what resolves while etcd is away).
  std::vector<std::string> CachedIds() const;
  // Whether the record is in etcd under a live lease, as far as this daemon knows.
  bool registered() const;

 private:
  EtcdRegistry(EtcdRegistryOptions options, v1::DaemonRecord self, std::unique_ptr<EtcdClient> etcd);
  absl::Status Register();
  void KeepAliveLoop();
  void WatchLoop();
  void Halt(bool revoke);

  const EtcdRegistryOptions options_;
  const v1::DaemonRecord self_;
  const std::string self_json_;
  const std::unique_ptr<EtcdClient> etcd_;
  absl::Notification stop_;
  std::thread keepalive_;
  std::thread watcher_;

  mutable kvt::Mutex mu_;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not registered
  bool halted_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::string> addresses_ ABSL_GUARDED_BY(mu_);  // daemon id -> peer address
};

}  // namespace kvt::server

#endif  // KVT_SERVER_ETCD_REGISTRY_H_
