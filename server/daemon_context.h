// What both sides of a daemon share: options, the registered regions, the data plane, peer connections, the
// codec workers, the request book and the metrics. Owned by Daemon; every pointer outlives the sides.
#ifndef KVT_SERVER_DAEMON_CONTEXT_H_
#define KVT_SERVER_DAEMON_CONTEXT_H_

#include "absl/status/status.h"
#include "server/host_buffer_pool.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/peer_directory.h"
#include "server/peer_liveness.h"
#include "server/peer_resolver.h"
#include "server/region_registry.h"
#include "server/request_book.h"
#include "server/worker_pool.h"
#include "transport/transport.h"

namespace kvt::server {

struct DaemonContext {
  const DaemonOptions* options = nullptr;
  RegionRegistry* regions = nullptr;
  transport::Transport* transport = nullptr;
  PeerDirectory* peers = nullptr;
  // The prefill daemons the decode side receives from, pinged on the control plane.
  PeerLiveness* liveness = nullptr;
  WorkerPool* workers = nullptr;
  // The tasks that hold a GPU slot while they run (GPU encodes of layers, GPU decode batches): as many threads as a
  // device has slots, so that waiting for a slot never takes a codec thread.
  WorkerPool* device_workers = nullptr;
  // Host buffers for encoded layers and layer inboxes, kept between requests.
  HostBufferPool* buffers = nullptr;
  RequestBook* book = nullptr;
  DaemonMetrics* metrics = nullptr;
  // This daemon's peer-service address as others dial it (for CancelTransfer back to us).
  std::string advertise_address;
  // Turns Offer.decode_daemon (host:port or a daemon id) into an address: static, or etcd with --etcd_endpoints.
  PeerResolver* resolver = nullptr;
};

// Ends a request's record, the same way on both sides: counts the outcome (done, cancelled, failed by cause),
// logs a failure, appends DONE or FAILED to its events and moves it to the book's finished list.
void FinishRecord(DaemonContext& context, RequestRecord& record, const absl::Status& status);

// The pool a codec task runs on: the device workers for a codec that holds a GPU slot while it runs (`on_device`),
// so that codec threads never wait for one; the codec workers otherwise.
WorkerPool* CodecWorkers(const DaemonContext& context, bool on_device);

// Records one run of a pipeline stage of `record` over [begin, end] that moved `bytes`: in its profile, and in the
// daemon's stage metrics unless `metrics` is false (per-chunk arrivals go to the profile only).
void RecordStage(DaemonContext& context, RequestRecord& record, Stage stage, absl::Time begin, absl::Time end,
                 uint64_t bytes = 0, bool metrics = true);

}  // namespace kvt::server

#endif  // KVT_SERVER_DAEMON_CONTEXT_H_
