#include "client/client.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"

namespace kvt {
namespace {

absl::Status WithContext(const grpc::Status& status, const char* call) {
  if (status.ok()) return absl::OkStatus();
  absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat(call, ": ", s.message()));
}

// The status a FAILED event reports.
absl::Status StatusOfFailure(const v1::TransferEvent& event) {
  const int code = event.status_code();
  return absl::Status(code >= 1 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown,
                      event.message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(absl::StrCat("unix:", options.socket), grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("no kvtd answers on ", options.socket,
                                               "; start one (kvtd --client_socket=", options.socket,
                                               ") or check the path and its permissions"));
  }
  return std::unique_ptr<Client>(new Client(options, v1::KvtClient::NewStub(channel)));
}

void Client::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
}

template <typename Request, typename Response>
absl::Status Client::Call(grpc::Status (v1::KvtClient::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                          const Request& request, Response* response, const char* name) const {
  grpc::ClientContext context;
  Prepare(&context);
  return WithContext((stub_.get()->*method)(&context, request, response), name);
}

absl::Status Client::RegisterRegion(const std::string& region_id, const v1::KvLayout& layout,
                                    const std::string& shm_name, uint64_t size_bytes) {
  v1::RegisterRegionRequest request;
  request.set_region_id(region_id);
  *request.mutable_layout() = layout;
  request.mutable_shm()->set_shm_name(shm_name);
  request.mutable_shm()->set_size_bytes(size_bytes);
  v1::RegisterRegionResponse response;
  return Call(&v1::KvtClient::Stub::RegisterRegion, request, &response, "RegisterRegion");
}

absl::Status Client::RegisterGpuRegion(const std::string& region_id, const v1::KvLayout& layout,
                                       const std::string& ipc_handle, uint64_t size_bytes, int device,
                                       uint64_t offset_bytes) {
  v1::RegisterRegionRequest request;
  request.set_region_id(region_id);
  *request.mutable_layout() = layout;
  request.mutable_cuda_ipc()->set_ipc_handle(ipc_handle);
  request.mutable_cuda_ipc()->set_size_bytes(size_bytes);
  request.mutable_cuda_ipc()->set_device(device);
  request.mutable_cuda_ipc()->set_offset_bytes(offset_bytes);
  v1::RegisterRegionResponse response;
  return Call(&v1::KvtClient::Stub::RegisterRegion, request, &response, "RegisterRegion");
}

absl::Status Client::UnregisterRegion(const std::string& region_id) {
  v1::UnregisterRegionRequest request;
  request.set_region_id(region_id);
  v1::UnregisterRegionResponse response;
  return Call(&v1::KvtClient::Stub::UnregisterRegion, request, &response, "UnregisterRegion");
}

absl::Status Client::Offer(const OfferSpec& spec) {
  v1::OfferRequest request;
  request.set_request_id(spec.request_id);
  request.set_region_id(spec.region_id);
  for (uint32_t b : spec.block_ids) request.add_block_ids(b);
  request.set_num_tokens(spec.num_tokens);
  for (uint32_t l : spec.ready_layers) request.add_ready_layers(l);
  request.mutable_scheme()->set_name(spec.scheme);
  request.set_decode_daemon(spec.decode_daemon);
  request.set_deadline_ms(static_cast<uint32_t>(std::max<int64_t>(0, absl::ToInt64Milliseconds(spec.deadline))));
  v1::OfferResponse response;
  return Call(&v1::KvtClient::Stub::Offer, request, &response, "Offer");
}

absl::Status Client::Expect(const ExpectSpec& spec) {
  v1::ExpectRequest request;
  request.set_request_id(spec.request_id);
  request.set_region_id(spec.region_id);
  for (uint32_t b : spec.block_ids) request.add_block_ids(b);
  request.set_num_tokens(spec.num_tokens);
  request.set_source_daemon(spec.source_daemon);
  request.set_deadline_ms(static_cast<uint32_t>(std::max<int64_t>(0, absl::ToInt64Milliseconds(spec.deadline))));
  request.set_allow_anchor_only(spec.allow_anchor_only);
  v1::ExpectResponse response;
  return Call(&v1::KvtClient::Stub::Expect, request, &response, "Expect");
}

absl::Status Client::Cancel(const std::string& request_id) {
  v1::CancelRequest request;
  request.set_request_id(request_id);
  v1::CancelResponse response;
  return Call(&v1::KvtClient::Stub::Cancel, request, &response, "Cancel");
}

absl::StatusOr<v1::StatsResponse> Client::Stats(bool include_requests) {
  v1::StatsRequest request;
  request.set_include_requests(include_requests);
  v1::StatsResponse response;
  KVT_RETURN_IF_ERROR(Call(&v1::KvtClient::Stub::Stats, request, &response, "Stats"));
  return response;
}

absl::StatusOr<v1::ProfileResponse> Client::Profile(const std::string& request_id, v1::Side side) {
  v1::ProfileRequest request;
  request.set_request_id(request_id);
  request.set_side(side);
  v1::ProfileResponse response;
  KVT_RETURN_IF_ERROR(Call(&v1::KvtClient::Stub::Profile, request, &response, "Profile"));
  return response;
}

absl::Status Client::Watch(const std::string& request_id,
                           const std::function<void(const v1::TransferEvent&)>& on_event, absl::Duration timeout,
                           v1::Side side) {
  v1::WatchRequest request;
  request.set_request_id(request_id);
  request.set_side(side);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  std::unique_ptr<grpc::ClientReader<v1::TransferEvent>> reader = stub_->Watch(&context, request);
  v1::TransferEvent event;
  absl::Status outcome = absl::DeadlineExceededError(
      absl::StrCat("request ", request_id, " did not finish within ", absl::FormatDuration(timeout)));
  bool terminal = false;
  while (reader->Read(&event)) {
    on_event(event);
    if (event.kind() == v1::TransferEvent::DONE) {
      outcome = absl::OkStatus();
      terminal = true;
    } else if (event.kind() == v1::TransferEvent::FAILED) {
      outcome = StatusOfFailure(event);
      terminal = true;
    }
    if (terminal) {
      context.TryCancel();
      break;
    }
  }
  const grpc::Status finish = reader->Finish();
  if (terminal) return outcome;
  if (finish.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return outcome;
  return WithContext(finish, "Watch");
}

absl::Status Client::WaitForLayer(const std::string& request_id, uint32_t layer, Precision precision,
                                  absl::Duration timeout) {
  const v1::TransferEvent::Kind wanted =
      precision == Precision::kAnchor ? v1::TransferEvent::ANCHOR_READY : v1::TransferEvent::FULL_READY;
  v1::WatchRequest request;
  request.set_request_id(request_id);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  std::unique_ptr<grpc::ClientReader<v1::TransferEvent>> reader = stub_->Watch(&context, request);
  v1::TransferEvent event;
  absl::Status result = absl::DeadlineExceededError(absl::StrCat("layer ", layer, " of request ", request_id,
                                                                 " not ready within ", absl::FormatDuration(timeout)));
  bool decided = false;
  while (!decided && reader->Read(&event)) {
    if (event.kind() == wanted && event.layer() == layer) {
      result = absl::OkStatus();
      decided = true;
    } else if (event.kind() == v1::TransferEvent::FAILED) {
      result = StatusOfFailure(event);
      decided = true;
    } else if (event.kind() == v1::TransferEvent::DONE) {
      result = absl::FailedPreconditionError(
          absl::StrCat("request ", request_id, " finished without layer ", layer, " reaching that precision"));
      decided = true;
    }
  }
  if (decided) {
    context.TryCancel();
    (void)reader->Finish();
    return result;
  }
  const grpc::Status finish = reader->Finish();
  if (finish.ok() || finish.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return result;
  return WithContext(finish, "Watch");
}

}  // namespace kvt
