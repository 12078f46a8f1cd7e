#include "transport/ucx/ucx_wire.h"

#include <array>
#include <cstring>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "transport/ucx/ucx_status.h"

namespace kvt::transport::internal {
namespace {

constexpr unsigned kChunkAmId = 1;
constexpr unsigned kControlAmId = 2;
constexpr unsigned kConnectAmId = 3;
constexpr size_t kTokenBytes = 8;
constexpr size_t kMaxHeaderBytes = 64;  // token + the largest kvt header
constexpr absl::Duration kCloseDrain = absl::Seconds(2);
// Completions reported per Progress call. Reporting a received chunk verifies its CRC; bounding the batch lets
// UCX move the next payloads between checks instead of idling through a long batch of them.
constexpr int kMaxCompletionsPerProgress = 4;
constexpr char kAddressPrefix[] = "ucx:";

uint64_t ReadToken(const void* header) {
  uint64_t token;
  std::memcpy(&token, header, kTokenBytes);
  return token;
}

}  // namespace

// Lives from a UCX operation's start to its callback: the AM header (token + kvt header) must stay valid that
// long, and the callback needs the wire and the cookie.
struct UcxWire::RequestContext {
  UcxWire* wire = nullptr;
  uint64_t cookie = 0;
  bool report = true;  // whether OnSendDone is owed to the engine
  std::array<uint8_t, kMaxHeaderBytes> header{};
};

// The payload of an active message, valid during the UCX receive callback only.
class UcxWire::Payload final : public InboundPayload {
 public:
  Payload(UcxWire* wire, void* data, size_t length, bool rndv)
      : wire_(wire), data_(data), length_(length), rndv_(rndv) {}
  size_t length() const override { return length_; }
  absl::StatusOr<bool> ReadInto(uint8_t* dest, uint64_t cookie) override {
    if (!rndv_) {
      if (length_ > 0) std::memcpy(dest, data_, length_);
      return true;
    }
    auto* ctx = new RequestContext{wire_, cookie};
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = &UcxWire::OnRecvComplete;
    param.user_data = ctx;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(wire_->worker_.get(), data_, dest, length_, &param);
    if (r == nullptr) {
      delete ctx;
      return true;
    }
    if (UCS_PTR_IS_ERR(r)) {
      delete ctx;
      return UcsToStatus(UCS_PTR_STATUS(r), "ucp_am_recv_data_nbx");
    }
    wire_->live_requests_.insert(ctx);
    return false;
  }

 private:
  UcxWire* wire_;
  void* data_;
  size_t length_;
  bool rndv_;
};

absl::StatusOr<std::unique_ptr<UcxWire>> UcxWire::Create(const Options& options, WireEvents* events) {
  std::unique_ptr<UcxWire> wire(new UcxWire(events));
  ucp_config_t* raw_config = nullptr;
  KVT_RETURN_IF_ERROR(UcsToStatus(ucp_config_read(nullptr, nullptr, &raw_config), "ucp_config_read"));
  UcpConfig config(raw_config);
  if (!options.ucx_tls.empty()) {
    KVT_RETURN_IF_ERROR(UcsToStatus(ucp_config_modify(config.get(), "TLS", options.ucx_tls.c_str()),
                                    absl::StrCat("UCX TLS=", options.ucx_tls)));
  }
  if (!options.ucx_net_devices.empty()) {
    KVT_RETURN_IF_ERROR(
        UcsToStatus(ucp_config_modify(config.get(), "NET_DEVICES", options.ucx_net_devices.c_str()),
                    absl::StrCat("UCX NET_DEVICES=", options.ucx_net_devices)));
  }

  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM;
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  KVT_RETURN_IF_ERROR(UcsToStatus(ucp_init(&params, config.get(), &context),
                                  absl::StrCat("ucp_init with TLS=", options.ucx_tls)));
  wire->context_.reset(context);

  ucp_worker_params_t worker_params = {};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  KVT_RETURN_IF_ERROR(
      UcsToStatus(ucp_worker_create(wire->context_.get(), &worker_params, &worker), "ucp_worker_create"));
  wire->worker_.reset(worker);

  for (unsigned id : {kChunkAmId, kControlAmId, kConnectAmId}) {
    ucp_am_handler_param_t am = {};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    am.id = id;
    am.flags = UCP_AM_FLAG_WHOLE_MSG;
    am.cb = id == kChunkAmId     ? &UcxWire::OnChunkMessage
            : id == kControlAmId ? &UcxWire::OnControlMessage
                                 : &UcxWire::OnConnectMessage;
    am.arg = wire.get();
    KVT_RETURN_IF_ERROR(
        UcsToStatus(ucp_worker_set_am_recv_handler(worker, &am), "ucp_worker_set_am_recv_handler"));
  }

  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  KVT_RETURN_IF_ERROR(
      UcsToStatus(ucp_worker_get_address(worker, &address, &address_length), "ucp_worker_get_address"));
  wire->worker_address_.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(worker, address);
  wire->address_ = absl::StrCat(kAddressPrefix, absl::BytesToHexString(wire->worker_address_));
  return wire;
}

UcxWire::~UcxWire() {
  for (auto& [id, e] : endpoints_) CloseEndpoint(*e);
  DrainCloseRequests(kCloseDrain);
  // Let UCX finish what the closes started before the worker goes.
  for (int i = 0; i < 100 && ucp_worker_progress(worker_.get()) > 0; ++i) {
  }
  worker_.reset();
  context_.reset();
  for (RequestContext* ctx : live_requests_) delete ctx;
}

absl::StatusOr<UcxWire::Endpoint*> UcxWire::AddEndpoint(const ucp_address_t* remote, uint64_t token) {
  auto e = std::make_unique<Endpoint>();
  e->wire = this;
  e->id = next_link_++;
  e->token = token;
  ucp_ep_params_t params = {};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = remote;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxWire::OnEndpointError;
  params.err_handler.arg = e.get();
  ucp_ep_h ep = nullptr;
  ucs_status_t status = UCS_ERR_UNREACHABLE;
  if (!peer_failure_handling_unsupported_) status = ucp_ep_create(worker_.get(), &params, &ep);
  if (status == UCS_ERR_UNREACHABLE) {
    peer_failure_handling_unsupported_ = true;
    // Shared-memory transports in UCX 1.13 have no peer failure handling; such a link relies on the engine's
    // heartbeats alone to notice a lost peer.
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    params.field_mask &= ~UCP_EP_PARAM_FIELD_ERR_HANDLER;
    status = ucp_ep_create(worker_.get(), &params, &ep);
  }
  KVT_RETURN_IF_ERROR(UcsToStatus(status, "ucp_ep_create"));
  e->ep = ep;
  Endpoint* out = e.get();
  by_token_[token] = e->id;
  endpoints_[e->id] = std::move(e);
  return out;
}

absl::StatusOr<LinkId> UcxWire::Connect(const std::string& address) {
  std::string remote;
  if (!absl::StartsWith(address, kAddressPrefix) || address.size() % 2 != 0 ||
      address.find_first_not_of("0123456789abcdefABCDEF", sizeof(kAddressPrefix) - 1) != std::string::npos ||
      address.size() == sizeof(kAddressPrefix) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("not a UCX worker address: \"", address.substr(0, 40), "\""));
  }
  remote = absl::HexStringToBytes(address.substr(sizeof(kAddressPrefix) - 1));
  uint64_t token = 0;
  absl::BitGen gen;
  while (token == 0 || by_token_.contains(token)) token = absl::Uniform<uint64_t>(gen);
  KVT_ASSIGN_OR_RETURN(Endpoint * e, AddEndpoint(reinterpret_cast<const ucp_address_t*>(remote.data()), token));
  // Tell the peer who we are; UCX queues it (and everything after it) until the endpoint is wired up.
  const absl::Status sent =
      SendRaw(*e, kConnectAmId, {}, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(worker_address_.data()),
                                                        worker_address_.size()),
              0, /*report=*/false);
  if (!sent.ok()) {
    CloseEndpoint(*e);
    return sent;
  }
  completions_.push_back({Completion::Type::kLinkUp, e->id, false, absl::OkStatus()});
  return e->id;
}

ucs_status_t UcxWire::OnConnectMessage(void* arg, const void* header, size_t header_length, void* data,
                                       size_t length, const ucp_am_recv_param_t* param) {
  auto* wire = static_cast<UcxWire*>(arg);
  if (header_length != kTokenBytes || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 || length == 0) {
    return UCS_OK;
  }
  const uint64_t token = ReadToken(header);
  if (token == 0 || wire->by_token_.contains(token)) return UCS_OK;
  auto e = wire->AddEndpoint(static_cast<const ucp_address_t*>(data), token);
  if (!e.ok()) {
    Logger("transport")->warn("cannot open a UCX endpoint back to a connecting peer: {}", e.status().ToString());
    return UCS_OK;
  }
  wire->completions_.push_back({Completion::Type::kLinkUp, (*e)->id, true, absl::OkStatus()});
  return UCS_OK;
}

void UcxWire::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* e = static_cast<Endpoint*>(arg);
  if (e->closed) return;
  e->wire->completions_.push_back(
      {Completion::Type::kLinkDown, e->id, false, UcsToStatus(status, "UCX endpoint")});
}

absl::Status UcxWire::SendRaw(Endpoint& e, unsigned am_id, absl::Span<const uint8_t> header,
                              absl::Span<const uint8_t> payload, uint64_t cookie, bool report) {
  if (header.size() + kTokenBytes > kMaxHeaderBytes) return absl::InvalidArgumentError("message header too large");
  auto* ctx = new RequestContext{this, cookie, report};
  std::memcpy(ctx->header.data(), &e.token, kTokenBytes);
  if (!header.empty()) std::memcpy(ctx->header.data() + kTokenBytes, header.data(), header.size());
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxWire::OnSendComplete;
  param.user_data = ctx;
  ucs_status_ptr_t r = ucp_am_send_nbx(e.ep, am_id, ctx->header.data(), kTokenBytes + header.size(),
                                       payload.empty() ? nullptr : payload.data(), payload.size(), &param);
  if (r == nullptr) {
    if (report) completions_.push_back({Completion::Type::kSendDone, cookie, false, absl::OkStatus()});
    delete ctx;
    return absl::OkStatus();
  }
  if (UCS_PTR_IS_ERR(r)) {
    delete ctx;
    return UcsToStatus(UCS_PTR_STATUS(r), "ucp_am_send_nbx");
  }
  live_requests_.insert(ctx);
  return absl::OkStatus();
}

absl::Status UcxWire::Send(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                           absl::Span<const uint8_t> payload, uint64_t cookie) {
  auto it = endpoints_.find(link);
  if (it == endpoints_.end() || it->second->closed) return absl::FailedPreconditionError("link is closed");
  return SendRaw(*it->second, kind == MessageKind::kChunk ? kChunkAmId : kControlAmId, header, payload, cookie,
                 /*report=*/true);
}

void UcxWire::OnSendComplete(void* request, ucs_status_t status, void* user_data) {
  auto* ctx = static_cast<RequestContext*>(user_data);
  if (ctx->report) {
    ctx->wire->completions_.push_back(
        {Completion::Type::kSendDone, ctx->cookie, false, UcsToStatus(status, "UCX send")});
  }
  ctx->wire->live_requests_.erase(ctx);
  delete ctx;
  ucp_request_free(request);
}

void UcxWire::OnRecvComplete(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  auto* ctx = static_cast<RequestContext*>(user_data);
  ctx->wire->completions_.push_back(
      {Completion::Type::kPayloadRead, ctx->cookie, false, UcsToStatus(status, "UCX receive")});
  ctx->wire->live_requests_.erase(ctx);
  delete ctx;
  ucp_request_free(request);
}

ucs_status_t UcxWire::OnChunkMessage(void* arg, const void* header, size_t header_length, void* data,
                                     size_t length, const ucp_am_recv_param_t* param) {
  static_cast<UcxWire*>(arg)->HandleMessage(MessageKind::kChunk, header, header_length, data, length, param);
  return UCS_OK;
}

ucs_status_t UcxWire::OnControlMessage(void* arg, const void* header, size_t header_length, void* data,
                                       size_t length, const ucp_am_recv_param_t* param) {
  static_cast<UcxWire*>(arg)->HandleMessage(MessageKind::kControl, header, header_length, data, length, param);
  return UCS_OK;
}

void UcxWire::HandleMessage(MessageKind kind, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param) {
  // The token names the link; a message without a known one is dropped (a rendezvous payload with it).
  if (header_length < kTokenBytes) return;
  auto it = by_token_.find(ReadToken(header));
  if (it == by_token_.end()) return;
  auto e = endpoints_.find(it->second);
  if (e == endpoints_.end() || e->second->closed) return;
  Payload payload(this, data, length, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
  events_->OnMessage(it->second, kind,
                     absl::MakeConstSpan(static_cast<const uint8_t*>(header) + kTokenBytes,
                                         header_length - kTokenBytes),
                     payload);
  // A rendezvous payload the engine did not read is dropped by UCX when the callback returns UCS_OK.
}

void UcxWire::CloseEndpoint(Endpoint& e) {
  if (e.closed) return;
  e.closed = true;
  by_token_.erase(e.token);
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(e.ep, &param);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) close_requests_.push_back(r);
  e.ep = nullptr;
}

void UcxWire::DrainCloseRequests(absl::Duration limit) {
  const absl::Time give_up = absl::Now() + limit;
  while (!close_requests_.empty() && absl::Now() < give_up) {
    ucp_worker_progress(worker_.get());
    for (auto it = close_requests_.begin(); it != close_requests_.end();) {
      if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
        ucp_request_free(*it);
        it = close_requests_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (!close_requests_.empty()) {
    Logger("transport")->warn("{} UCX endpoint closes did not finish", close_requests_.size());
  }
}

void UcxWire::Close(LinkId link) {
  auto it = endpoints_.find(link);
  if (it == endpoints_.end()) return;
  CloseEndpoint(*it->second);
}

int UcxWire::Progress() {
  int work = 0;
  while (ucp_worker_progress(worker_.get()) > 0) ++work;
  for (auto it = close_requests_.begin(); it != close_requests_.end();) {
    if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
      ucp_request_free(*it);
      it = close_requests_.erase(it);
    } else {
      ++it;
    }
  }
  // Report what the callbacks queued, a bounded batch at a time (the rest next call); reporting may queue more (a
  // hello sent on link up completes at once).
  for (int reported = 0; reported < kMaxCompletionsPerProgress && !completions_.empty(); ++reported) {
    Completion c = std::move(completions_.front());
    completions_.pop_front();
    ++work;
    switch (c.type) {
      case Completion::Type::kSendDone:
        events_->OnSendDone(c.cookie_or_link, c.status);
        break;
      case Completion::Type::kPayloadRead:
        events_->OnPayloadRead(c.cookie_or_link, c.status);
        break;
      case Completion::Type::kLinkUp: {
        auto e = endpoints_.find(c.cookie_or_link);
        if (e != endpoints_.end() && !e->second->closed) events_->OnLinkUp(c.cookie_or_link, c.inbound);
        break;
      }
      case Completion::Type::kLinkDown: {
        auto e = endpoints_.find(c.cookie_or_link);
        if (e != endpoints_.end() && !e->second->closed) {
          CloseEndpoint(*e->second);
          events_->OnLinkDown(c.cookie_or_link, c.status);
        }
        break;
      }
    }
  }
  return work;
}

}  // namespace kvt::transport::internal
