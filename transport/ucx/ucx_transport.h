// The production Transport: the link engine over UCX (ucp active messages). Which UCX transports carry the
// bytes (tcp, shm/cma, RDMA when present) is chosen by Options::ucx_tls / ucx_net_devices, never by environment
// variables read here. address() is the UCX worker address ("ucx:" + hex): pass it to the peer's Connect (the
// control plane carries it in its hello).
#ifndef KVT_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define KVT_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "transport/options.h"
#include "transport/transport.h"

namespace kvt::transport {

// Errors: INVALID_ARGUMENT for bad options; the UCX error otherwise (e.g. when the requested transports are not
// available on this machine).
absl::StatusOr<std::unique_ptr<Transport>> NewUcxTransport(const Options& options);

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_UCX_UCX_TRANSPORT_H_
