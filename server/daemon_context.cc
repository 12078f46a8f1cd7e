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

WorkerPool* CodecWorkers(const DaemonContext& context, bool on_device) {
  return on_device && context.device_workers != nullptr ? context.device_workers : context.workers;
}

void RecordStage(DaemonContext& context, RequestRecord& record, Stage stage, absl::Time begin, absl::Time end,
                 uint64_t bytes, bool metrics) {
  record.profile.Add(stage, begin, end, bytes);
  if (metrics) context.metrics->StageRun(stage, end - begin, bytes);
}

}  // namespace kvt::server
