#include "server/peer_service.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/scheme.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "kv/layout_proto.h"
#include "server/options.h"
#include "server/proto_convert.h"

namespace kvt::server {
namespace {

constexpr int kMaxAnnouncedPages = 1 << 22;

absl::StatusOr<OpenArgs> ParseOpen(const v1::OpenTransferRequest& r) {
  OpenArgs args;
  KVT_RETURN_IF_ERROR(ValidateId(r.request_id(), "request_id", 256));
  KVT_RETURN_IF_ERROR(ValidateId(r.source_daemon_id(), "source_daemon_id", 128));
  args.request_id = r.request_id();
  args.source_daemon_id = r.source_daemon_id();
  args.source_address = r.source_address();
  if (args.source_address.size() > 255) return absl::InvalidArgumentError("source_address is longer than 255 bytes");
  KVT_ASSIGN_OR_RETURN(args.scheme, SchemeFromProto(r.scheme()));
  if (!r.has_source_layout()) return absl::InvalidArgumentError("source_layout is missing");
  KVT_ASSIGN_OR_RETURN(args.source_layout, kv::LayoutFromProto(r.source_layout()));
  // The dims and strides must make sense on their own; the source's region size is not ours to check.
  KVT_RETURN_IF_ERROR(kv::KvLayout::Create(args.source_layout, ~uint64_t{0}).status());
  args.num_tokens = r.num_tokens();
  args.page_tokens = r.page_tokens();
  if (r.chunk_tokens() < 1 || r.chunk_tokens() > 256) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_tokens must be 1..256, got ", r.chunk_tokens()));
  }
  args.chunk_tokens = static_cast<int>(r.chunk_tokens());
  if (r.pages_size() == 0 || r.pages_size() > kMaxAnnouncedPages) {
    return absl::InvalidArgumentError(absl::StrFormat("pages must hold 1..%d entries, got %d", kMaxAnnouncedPages,
                                                      r.pages_size()));
  }
  args.pages.reserve(r.pages_size());
  for (const v1::PageSpan& p : r.pages()) {
    if (p.stream_bytes_size() < 1 || p.stream_bytes_size() > codec::kMaxStreams) {
      return absl::InvalidArgumentError(absl::StrFormat("a page announces %d streams, 1..%d allowed",
                                                        p.stream_bytes_size(), codec::kMaxStreams));
    }
    kv::PlannedPage page;
    page.spec = kv::PageSpec{p.layer(), p.kind(), p.first_token(), p.tokens()};
    page.stream_bytes.assign(p.stream_bytes().begin(), p.stream_bytes().end());
    args.pages.push_back(std::move(page));
  }
  return args;
}

}  // namespace

grpc::Status PeerService::Hello(grpc::ServerContext* ctx, const v1::HelloRequest* request,
                                v1::HelloResponse* response) {
  if (grpc::Status auth = security_->Authenticate(*ctx); !auth.ok()) return auth;
  absl::StatusOr<v1::HelloResponse> answer = context_->peers->Answer(*request);
  if (!answer.ok()) return ToGrpcStatus(answer.status());
  *response = *std::move(answer);
  return grpc::Status::OK;
}

grpc::Status PeerService::OpenTransfer(grpc::ServerContext* ctx, const v1::OpenTransferRequest* request,
                                       v1::OpenTransferResponse* response) {
  if (grpc::Status auth = security_->Authenticate(*ctx); !auth.ok()) return auth;
  if (decode_ == nullptr) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("daemon ", context_->options->daemon_id, " runs as ", RoleName(context_->options->role),
                     " and receives no transfers; point Offer's decode_daemon at a decode daemon")));
  }
  absl::StatusOr<OpenArgs> args = ParseOpen(*request);
  if (!args.ok()) return ToGrpcStatus(args.status());
  absl::StatusOr<absl::Duration> wait = DeadlineFromMs(request->deadline_ms(), "deadline_ms");
  if (!wait.ok()) return ToGrpcStatus(wait.status());
  const absl::Time wait_until = std::min(absl::Now() + *wait, absl::FromChrono(ctx->deadline()));
  absl::StatusOr<uint64_t> first = decode_->Open(*args, wait_until);
  if (!first.ok()) return ToGrpcStatus(first.status());
  response->set_first_transfer_id(*first);
  return grpc::Status::OK;
}

grpc::Status PeerService::CancelTransfer(grpc::ServerContext* ctx, const v1::CancelTransferRequest* request,
                                         v1::CancelTransferResponse*) {
  if (grpc::Status auth = security_->Authenticate(*ctx); !auth.ok()) return auth;
  absl::Status valid = ValidateId(request->request_id(), "request_id", 256);
  if (!valid.ok()) return ToGrpcStatus(valid);
  const std::string reason = request->reason().substr(0, 512);
  const int code = request->status_code();
  const absl::StatusCode status_code =
      code >= 1 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kCancelled;
  const absl::Status why(status_code, absl::StrCat("the peer daemon stopped the transfer: ", reason));
  // Unknown or finished requests are fine: the peer may be cleaning up after a transfer that already ended here.
  if (decode_ != nullptr) (void)decode_->Cancel(request->request_id(), why, /*notify_peer=*/false);
  if (prefill_ != nullptr) (void)prefill_->Cancel(request->request_id(), why, /*notify_peer=*/false);
  return grpc::Status::OK;
}

}  // namespace kvt::server
