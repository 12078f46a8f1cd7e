// Turns ucs_status_t into absl::Status: the one place UCX error codes are interpreted. Thread-safe.
#ifndef KVT_TRANSPORT_UCX_UCX_STATUS_H_
#define KVT_TRANSPORT_UCX_UCX_STATUS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "ucs/type/status.h"

namespace kvt::transport::internal {

// OK for UCS_OK and UCS_INPROGRESS; otherwise a canonical code (UNAVAILABLE for a lost or unreachable peer,
// DEADLINE_EXCEEDED for timeouts, CANCELLED, RESOURCE_EXHAUSTED, INVALID_ARGUMENT, ...) whose message names
// `what` and UCX's own text.
absl::Status UcsToStatus(ucs_status_t status, absl::string_view what);

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_UCX_UCX_STATUS_H_
