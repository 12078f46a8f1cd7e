#include "server/daemon_context.h"

#include "common/logging.h"

namespace kvt::server {

void FinishRecord(DaemonContext& context, RequestRecord& record, const absl::Status& status) {
  Outcome outcome = Outcome::kDone;
  if (status.code() == absl::StatusCode::kCancelled) {
    outcome = Outcome::kCancelled;
  } else if (!status.ok()) {
    outcome = Outcome::kFailed;
    Logger("server")->warn("request {} ({} side) failed: {}", record.request_id, SideName(record.side),
                           status.ToString());
  }
  context.metrics->TransferFinished(record.side, outcome, status.code());
  record.events.Finish(status);
  context.book->Retire(record);
}

}  // namespace kvt::server
