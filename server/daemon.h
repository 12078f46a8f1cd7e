// kvtd: one daemon, in-process. Owns the data plane, the region registry, the codec workers, the prefill and
// decode sides (as its role says), the client service on a unix socket, the peer service on TCP and the
// metrics endpoint. kvtd_main.cc is a thin main over it; tests run two in one process.
//
//   KVT_ASSIGN_OR_RETURN(std::unique_ptr<Daemon> d, Daemon::Start(options));
//   ... d->peer_address() to give to other daemons, d->client_socket() to clients ...
//   d.reset();  // orderly: services stop, live requests are cancelled (peers told), the data plane closes
#ifndef KVT_SERVER_DAEMON_H_
#define KVT_SERVER_DAEMON_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/client_service.h"
#include "server/daemon_context.h"
#include "server/decode_side.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/etcd_registry.h"
#include "server/peer_directory.h"
#include "server/peer_resolver.h"
#include "server/peer_liveness.h"
#include "server/peer_security.h"
#include "server/peer_service.h"
#include "server/prefill_side.h"
#include "server/region_registry.h"
#include "server/request_book.h"
#include "server/worker_pool.h"
#include "transport/transport.h"

namespace kvt::server {

class Daemon {
 public:
  // Validates `options` and brings every part up. Errors name what failed: INVALID_ARGUMENT (options),
  // UNAVAILABLE (a port or socket cannot be bound), ALREADY_EXISTS (another daemon serves the client socket),
  // NOT_FOUND / PERMISSION_DENIED (TLS files), or the data plane's error.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();

  const DaemonOptions& options() const { return options_; }
  // The peer service's address as other daemons dial it.
  const std::string& peer_address() const { return context_.advertise_address; }
  const std::string& client_socket() const { return options_.client_socket; }
  int metrics_port() const { return metrics_->port(); }
  const std::string& daemon_id() const { return options_.daemon_id; }

  // For tests: the data plane (e.g. to freeze it as a hung daemon would be).
  transport::Transport* transport_for_test() { return transport_.get(); }

 private:
  explicit Daemon(DaemonOptions options) : options_(std::move(options)) {}
  absl::Status Init();
  absl::Status StartClientServer();
  absl::Status StartPeerServer();
  absl::Status StartRegistry();
  void SyncGauges();

  const DaemonOptions options_;
  std::unique_ptr<DaemonMetrics> metrics_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<PeerSecurity> security_;
  std::unique_ptr<PeerDirectory> peers_;
  std::unique_ptr<PeerLiveness> liveness_;
  std::unique_ptr<PeerResolver> resolver_;  // StaticPeerResolver, or the EtcdRegistry below
  EtcdRegistry* etcd_ = nullptr;            // owned by resolver_ when --etcd_endpoints is given
  std::unique_ptr<WorkerPool> workers_;
  std::unique_ptr<WorkerPool> device_workers_;
  std::shared_ptr<HostBufferPool> buffers_;
  std::unique_ptr<RequestBook> book_;
  std::unique_ptr<RegionRegistry> regions_;
  DaemonContext context_;
  std::unique_ptr<PrefillSide> prefill_;
  std::unique_ptr<DecodeSide> decode_;
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<ClientService> client_service_;
  std::unique_ptr<grpc::Server> peer_server_;
  std::unique_ptr<grpc::Server> client_server_;

  // Copies the data plane's counters into the metrics once a second.
  kvt::Notification stop_sync_;
  std::thread sync_thread_;
  std::array<uint64_t, 5> rejected_seen_{};  // the sync thread's last view of the rejected-chunk counters
};

}  // namespace kvt::server

#endif  // KVT_SERVER_DAEMON_H_
