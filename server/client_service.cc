#include "server/client_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "kv/layout_proto.h"
#include "server/proto_convert.h"
#include "server/stage_profile.h"

namespace kvt::server {
namespace {

constexpr size_t kMaxRequestIdBytes = 256;
constexpr size_t kMaxRegionIdBytes = 128;
constexpr int kMaxBlockIds = 1 << 24;

absl::Status CheckBlocks(const google::protobuf::RepeatedField<uint32_t>& ids) {
  if (ids.empty()) return absl::InvalidArgumentError("block_ids is empty");
  if (ids.size() > kMaxBlockIds) {
    return absl::InvalidArgumentError(absl::StrFormat("block_ids has %d entries, at most %d", ids.size(), kMaxBlockIds));
  }
  return absl::OkStatus();
}

absl::Status CheckHostPort(const std::string& value, const char* field) {
  const size_t colon = value.rfind(':');
  if (value.empty() || value.size() > 255 || colon == std::string::npos || colon == 0 || colon + 1 == value.size()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be host:port, got \"", value, "\""));
  }
  return absl::OkStatus();
}

// The request a Watch or Profile names, on the side it means: the one asked for, else decode if it knows the
// request, else prefill. INVALID_ARGUMENT for a malformed id, NOT_FOUND for one neither side knows.
absl::StatusOr<std::shared_ptr<RequestRecord>> FindRecord(RequestBook* book, v1::Side side, const std::string& id) {
  KVT_RETURN_IF_ERROR(ValidateId(id, "request_id", kMaxRequestIdBytes));
  std::shared_ptr<RequestRecord> r;
  if (side == v1::SIDE_PREFILL) {
    r = book->Find(Side::kPrefill, id);
  } else if (side == v1::SIDE_DECODE) {
    r = book->Find(Side::kDecode, id);
  } else {
    r = book->Find(Side::kDecode, id);
    if (r == nullptr) r = book->Find(Side::kPrefill, id);
  }
  if (r == nullptr) {
    return absl::NotFoundError(absl::StrCat("no request \"", id, "\" on this daemon (live or recently finished)"));
  }
  return r;
}

}  // namespace

grpc::Status ClientService::RegisterRegion(grpc::ServerContext*, const v1::RegisterRegionRequest* request,
                                           v1::RegisterRegionResponse*) {
  absl::Status s = [&]() -> absl::Status {
    KVT_RETURN_IF_ERROR(ValidateId(request->region_id(), "region_id", kMaxRegionIdBytes));
    if (!request->has_layout()) return absl::InvalidArgumentError("layout is missing");
    KVT_ASSIGN_OR_RETURN(kv::KvLayoutSpec layout, kv::LayoutFromProto(request->layout()));
    switch (request->memory_case()) {
      case v1::RegisterRegionRequest::kShm:
        return context_->regions->RegisterShm(request->region_id(), layout, request->shm().shm_name(),
                                              request->shm().size_bytes());
      case v1::RegisterRegionRequest::kCudaIpc:
        // Without a GPU this fails with FAILED_PRECONDITION, saying so.
        return context_->regions->RegisterCudaIpc(request->region_id(), layout, request->cuda_ipc().ipc_handle(),
                                                  request->cuda_ipc().size_bytes(), request->cuda_ipc().device(),
                                                  request->cuda_ipc().offset_bytes());
      default:
        return absl::InvalidArgumentError("memory is missing: set shm (or cuda_ipc)");
    }
  }();
  return ToGrpcStatus(s);
}

grpc::Status ClientService::UnregisterRegion(grpc::ServerContext*, const v1::UnregisterRegionRequest* request,
                                             v1::UnregisterRegionResponse*) {
  absl::Status s = ValidateId(request->region_id(), "region_id", kMaxRegionIdBytes);
  if (s.ok()) s = context_->regions->Unregister(request->region_id());
  return ToGrpcStatus(s);
}

grpc::Status ClientService::Offer(grpc::ServerContext*, const v1::OfferRequest* request, v1::OfferResponse*) {
  absl::Status s = [&]() -> absl::Status {
    if (prefill_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("this daemon runs as ", RoleName(context_->options->role),
                                                        "; Offer needs --role=prefill or both"));
    }
    OfferArgs args;
    KVT_RETURN_IF_ERROR(ValidateId(request->request_id(), "request_id", kMaxRequestIdBytes));
    KVT_RETURN_IF_ERROR(ValidateId(request->region_id(), "region_id", kMaxRegionIdBytes));
    KVT_RETURN_IF_ERROR(CheckBlocks(request->block_ids()));
    if (request->decode_daemon().empty()) {
      return absl::InvalidArgumentError("decode_daemon is required: host:port, or a daemon id (with etcd)");
    }
    KVT_ASSIGN_OR_RETURN(std::string decode_address, context_->resolver->Resolve(request->decode_daemon()));
    KVT_RETURN_IF_ERROR(CheckHostPort(decode_address, "decode_daemon"));
    KVT_ASSIGN_OR_RETURN(args.scheme, SchemeFromProto(request->scheme()));
    KVT_ASSIGN_OR_RETURN(args.deadline, DeadlineFromMs(request->deadline_ms(), "deadline_ms"));
    args.request_id = request->request_id();
    args.region_id = request->region_id();
    args.block_ids.assign(request->block_ids().begin(), request->block_ids().end());
    args.num_tokens = request->num_tokens();
    args.ready_layers.assign(request->ready_layers().begin(), request->ready_layers().end());
    args.decode_daemon = std::move(decode_address);
    return prefill_->Offer(args);
  }();
  return ToGrpcStatus(s);
}

grpc::Status ClientService::Expect(grpc::ServerContext*, const v1::ExpectRequest* request, v1::ExpectResponse*) {
  absl::Status s = [&]() -> absl::Status {
    if (decode_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("this daemon runs as ", RoleName(context_->options->role),
                                                        "; Expect needs --role=decode or both"));
    }
    ExpectArgs args;
    KVT_RETURN_IF_ERROR(ValidateId(request->request_id(), "request_id", kMaxRequestIdBytes));
    KVT_RETURN_IF_ERROR(ValidateId(request->region_id(), "region_id", kMaxRegionIdBytes));
    KVT_RETURN_IF_ERROR(CheckBlocks(request->block_ids()));
    if (!request->source_daemon().empty()) {
      KVT_RETURN_IF_ERROR(ValidateId(request->source_daemon(), "source_daemon", 128));
    }
    KVT_ASSIGN_OR_RETURN(args.deadline, DeadlineFromMs(request->deadline_ms(), "deadline_ms"));
    args.request_id = request->request_id();
    args.region_id = request->region_id();
    args.block_ids.assign(request->block_ids().begin(), request->block_ids().end());
    args.num_tokens = request->num_tokens();
    args.source_daemon = request->source_daemon();
    args.allow_anchor_only = request->allow_anchor_only();
    return decode_->Expect(args);
  }();
  return ToGrpcStatus(s);
}

grpc::Status ClientService::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* request,
                                  grpc::ServerWriter<v1::TransferEvent>* writer) {
  absl::StatusOr<std::shared_ptr<RequestRecord>> found =
      FindRecord(context_->book, request->side(), request->request_id());
  if (!found.ok()) return ToGrpcStatus(found.status());
  const std::shared_ptr<RequestRecord> record = *std::move(found);
  size_t next = 0;
  while (true) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled by the client");
    bool finished = false;
    // Short waits, so a client that went away or a passed deadline ends the call promptly.
    const std::vector<RequestEvent> events =
        record->events.WaitFrom(next, absl::Now() + absl::Milliseconds(100), &finished);
    for (const RequestEvent& e : events) {
      if (!writer->Write(EventToProto(e))) return grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away");
    }
    next += events.size();
    if (finished && events.empty()) return grpc::Status::OK;
    if (finished && !events.empty() &&
        (events.back().kind == EventKind::kDone || events.back().kind == EventKind::kFailed)) {
      return grpc::Status::OK;
    }
  }
}

grpc::Status ClientService::Cancel(grpc::ServerContext*, const v1::CancelRequest* request, v1::CancelResponse*) {
  absl::Status valid = ValidateId(request->request_id(), "request_id", kMaxRequestIdBytes);
  if (!valid.ok()) return ToGrpcStatus(valid);
  const absl::Status why = absl::CancelledError(absl::StrCat("request ", request->request_id(), " cancelled by a client"));
  bool known = false;
  for (Side side : {Side::kDecode, Side::kPrefill}) {
    std::shared_ptr<RequestRecord> record = context_->book->Find(side, request->request_id());
    if (record == nullptr) continue;
    known = true;
    if (!record->events.finished() && record->cancel) record->cancel(why, /*notify_peer=*/true);
  }
  if (!known) {
    return ToGrpcStatus(absl::NotFoundError(absl::StrCat("no request \"", request->request_id(), "\" on this daemon")));
  }
  return grpc::Status::OK;
}

grpc::Status ClientService::Stats(grpc::ServerContext*, const v1::StatsRequest* request,
                                  v1::StatsResponse* response) {
  const DaemonMetrics::Totals totals = context_->metrics->totals();
  response->set_daemon_id(context_->options->daemon_id);
  response->set_transfers_started(totals.started);
  response->set_transfers_done(totals.done);
  response->set_transfers_failed(totals.failed);
  response->set_transfers_cancelled(totals.cancelled);
  response->set_anchor_bytes_sent(totals.anchor_bytes_sent);
  response->set_residual_bytes_sent(totals.residual_bytes_sent);
  response->set_bytes_received(totals.bytes_received);
  const transport::TransportStats t = context_->transport->stats();
  response->set_chunks_rejected(t.rejected_malformed + t.rejected_bad_crc + t.rejected_unknown_transfer +
                                t.rejected_out_of_bounds + t.rejected_over_window);
  response->set_regions(static_cast<uint32_t>(context_->regions->size()));
  const std::vector<std::shared_ptr<RequestRecord>> live = context_->book->Live();
  response->set_in_flight(static_cast<uint32_t>(live.size()));
  if (request->include_requests()) {
    const absl::Time now = absl::Now();
    for (const auto& r : live) {
      v1::RequestState* state = response->add_requests();
      state->set_request_id(r->request_id);
      state->set_side(r->side == Side::kPrefill ? v1::SIDE_PREFILL : v1::SIDE_DECODE);
      auto [scheme, peer] = r->labels();
      state->set_scheme(scheme);
      state->set_peer(peer);
      state->set_num_layers(r->num_layers.load());
      state->set_layers_anchor_ready(r->layers_anchor_ready.load());
      state->set_layers_full_ready(r->layers_full_ready.load());
      state->set_age_us(static_cast<uint64_t>(absl::ToInt64Microseconds(now - r->events.start())));
    }
  }
  return grpc::Status::OK;
}

grpc::Status ClientService::Profile(grpc::ServerContext*, const v1::ProfileRequest* request,
                                    v1::ProfileResponse* response) {
  absl::StatusOr<std::shared_ptr<RequestRecord>> found =
      FindRecord(context_->book, request->side(), request->request_id());
  if (!found.ok()) return ToGrpcStatus(found.status());
  const std::shared_ptr<RequestRecord> record = *std::move(found);
  response->set_request_id(record->request_id);
  response->set_side(record->side == Side::kPrefill ? v1::SIDE_PREFILL : v1::SIDE_DECODE);
  response->set_finished(record->events.finished());
  const auto totals = record->profile.Snapshot();
  for (int i = 0; i < kStageCount; ++i) {
    const StageTotals& t = totals[i];
    if (t.count == 0) continue;
    v1::StageTime* stage = response->add_stages();
    stage->set_stage(std::string(StageName(static_cast<Stage>(i))));
    stage->set_count(t.count);
    stage->set_busy_us(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(t.busy))));
    stage->set_first_start_us(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(t.first_start))));
    stage->set_last_end_us(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(t.last_end))));
    stage->set_bytes(t.bytes);
  }
  return grpc::Status::OK;
}

}  // namespace kvt::server
