// One UCX context and worker, made the one way kvt makes them: UCX's configuration from the environment, then
// the caller's TLS and NET_DEVICES on top, the features asked for (wakeup dropped where UCX cannot give it), a
// worker in the asked thread mode, and the worker's address for peers. Used by the data plane's rails
// (ucx_rail.h) and the collectives' UcxWire (collective/ucx_wire.h), so a UCX setting means the same in
// both.
//
//   KVT_ASSIGN_OR_RETURN(UcxWorker w, CreateUcxWorker({.tls = "tcp", .features = UCP_FEATURE_TAG,
//                                                     .thread_mode = UCS_THREAD_MODE_SERIALIZED}));
//   ... w.worker.get(), w.address ...
//
// Destroy the worker before the context (declare them in this order: context, then worker).
#ifndef KVT_TRANSPORT_UCX_UCX_WORKER_H_
#define KVT_TRANSPORT_UCX_UCX_WORKER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "transport/ucx/ucx_handles.h"
#include "ucp/api/ucp.h"

namespace kvt::transport::internal {

struct UcxWorkerSpec {
  // UCX_TLS for this context ("" keeps UCX's choice or the environment's).
  std::string tls;
  // UCX_NET_DEVICES ("" likewise).
  std::string net_devices;
  // UCP_FEATURE_* bits. UCP_FEATURE_WAKEUP is dropped, and the context made again without it, when UCX refuses
  // it (UcxWorker::wakeup says which).
  uint64_t features = UCP_FEATURE_AM;
  // Whether workers of other contexts share nothing with this one (UCP_PARAM_FIELD_MT_WORKERS_SHARED = 0).
  bool workers_unshared = false;
  ucs_thread_mode_t thread_mode = UCS_THREAD_MODE_SINGLE;
};

struct UcxWorker {
  UcpContext context;
  UcpWorker worker;  // declared after the context: destroyed first
  // The worker's address (ucp_worker_get_address), for peers to connect to.
  std::string address;
  // Whether the context has UCP_FEATURE_WAKEUP (asked for and given).
  bool wakeup = false;
};

// An error names the UCX call and the TLS asked for.
absl::StatusOr<UcxWorker> CreateUcxWorker(const UcxWorkerSpec& spec);

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_UCX_UCX_WORKER_H_
