// An in-process Transport for tests: the real link engine over a wire made of in-memory queues, so lanes,
// pacing, flow control and failure handling are exercised without UCX. Transports in one process reach each
// other by address ("loopback:N"). Thread-safe like every Transport.
#ifndef KVT_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_
#define KVT_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "transport/options.h"
#include "transport/transport.h"

namespace kvt::transport {

// The UCX fields of `options` are ignored.
absl::StatusOr<std::unique_ptr<Transport>> NewLoopbackTransport(const Options& options);

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_
