// A copy of an absl::Status that shares no heap state with its source, for statuses stored by one thread and
// read by another. Debian's Abseil is not built with ThreadSanitizer: a Status's message lives in a rep whose
// reference count is dropped inside libabsl_status.so, where TSan cannot see the atomics, so a rep shared
// between threads shows up as a race when its last owner frees it. Keeping one owner per rep avoids that.
// Payloads are not copied (kvt sets none). Thread-safe.
#ifndef KVT_TRANSPORT_INTERNAL_DETACHED_STATUS_H_
#define KVT_TRANSPORT_INTERNAL_DETACHED_STATUS_H_

#include <string>

#include "absl/status/status.h"

namespace kvt::transport::internal {

inline absl::Status Detached(const absl::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(s.code(), std::string(s.message()));
}

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_DETACHED_STATUS_H_
