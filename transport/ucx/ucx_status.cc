#include "transport/ucx/ucx_status.h"

#include "absl/strings/str_cat.h"

namespace kvt::transport::internal {

absl::Status UcsToStatus(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return absl::OkStatus();
  absl::StatusCode code;
  switch (status) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_OUT_OF_RANGE:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case UCS_ERR_TIMED_OUT:
      code = absl::StatusCode::kDeadlineExceeded;
      break;
    case UCS_ERR_CANCELED:
      code = absl::StatusCode::kCancelled;
      break;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_ELEM:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case UCS_ERR_BUSY:
    case UCS_ERR_ALREADY_EXISTS:
      code = absl::StatusCode::kUnavailable;
      break;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SOME_CONNECTS_FAILED:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      code = absl::StatusCode::kInternal;
      break;
  }
  return absl::Status(code, absl::StrCat(what, ": ", ucs_status_string(status)));
}

}  // namespace kvt::transport::internal
