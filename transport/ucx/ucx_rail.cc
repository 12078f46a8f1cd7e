#include "transport/ucx/ucx_rail.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "transport/ucx/ucx_status.h"
#include "transport/ucx/ucx_worker.h"

namespace kvt::transport::internal {
namespace {

// ucp_worker_progress calls per Drive: bounded so that queued operations (an anchor chunk's send) are not held
// back by a long run of completions.
constexpr int kMaxPollsPerDrive = 64;
// A rail thread that found nothing to do this many times in a row sleeps until an operation is queued or (with
// UCX's wakeup feature) a UCX event arrives, for at most kArmedSleepMs; without the feature, for kIdleSleep (UCX
// events arriving meanwhile wait that long). Polling every 100 us kept an idle rail at 0.1-0.25 of a core, and a
// busy one near a whole core whatever the link's rate (docs/BENCHMARKS.md, "Rails that sleep on UCX's events").
constexpr int kIdleSpins = 256;
constexpr absl::Duration kIdleSleep = absl::Microseconds(100);
constexpr int kArmedSleepMs = 5;

}  // namespace

bool SharedMemoryOnly(absl::string_view ucx_tls) {
  static const absl::flat_hash_set<std::string> kShared = {"shm",  "sm",    "posix", "sysv", "cma",
                                                           "knem", "xpmem", "mm",    "self"};
  bool any = false;
  for (absl::string_view name : absl::StrSplit(ucx_tls, ',', absl::SkipWhitespace())) {
    name = absl::StripAsciiWhitespace(name);
    if (!kShared.contains(absl::AsciiStrToLower(name))) return false;  // a network transport, "all" or "^..."
    any = true;
  }
  return any;
}

struct UcxRail::Endpoint {
  UcxRail* rail = nullptr;
  uint64_t token = 0;
  ucp_ep_h ep = nullptr;
  bool closed = false;
};

// Lives from a UCX operation's start to its callback: the AM header must stay valid that long, and the callback
// needs the rail and the cookie.
struct UcxRail::RequestContext {
  UcxRail* rail = nullptr;
  uint64_t cookie = 0;
  bool report = true;  // whether a completion event is owed
  AmHeader header;
  std::string owned;  // a payload the rail keeps (SendOwned)
};

absl::StatusOr<std::unique_ptr<UcxRail>> UcxRail::Create(int index, const Options& options, RailEventSink* sink) {
  std::unique_ptr<UcxRail> rail(new UcxRail(index, sink));
  rail->peer_failure_handling_unsupported_ = SharedMemoryOnly(options.ucx_tls);
  // A context per rail: rails share nothing in UCX, so each worker stays single-threaded.
  // Rails with threads of their own (more than one worker) sleep on UCX's event descriptor when idle, which takes
  // the wakeup feature; a UCX that cannot give it falls back to polling.
  const uint64_t features = UCP_FEATURE_AM | (options.ucx_workers > 1 ? UCP_FEATURE_WAKEUP : 0);
  KVT_ASSIGN_OR_RETURN(UcxWorker made, CreateUcxWorker({.tls = options.ucx_tls,
                                                        .net_devices = options.ucx_net_devices,
                                                        .features = features,
                                                        .workers_unshared = true,
                                                        .thread_mode = UCS_THREAD_MODE_SINGLE}));
  rail->context_ = std::move(made.context);
  rail->worker_ = std::move(made.worker);
  rail->worker_address_ = std::move(made.address);
  ucp_worker_h worker = rail->worker_.get();
  if (made.wakeup) {
    int efd = -1;
    const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake >= 0 && ucp_worker_get_efd(worker, &efd) == UCS_OK) {
      rail->event_fd_ = efd;  // the worker's: closed with it
      rail->wake_fd_ = wake;
    } else if (wake >= 0) {
      close(wake);
    }
  }

  const unsigned ids[] = {kChunkAmId, kControlAmId, kConnectAmId};
  for (size_t i = 0; i < rail->handlers_.size(); ++i) {
    const unsigned id = ids[i];
    rail->handlers_[i] = Handler{rail.get(), id};
    ucp_am_handler_param_t am = {};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    am.id = id;
    am.flags = UCP_AM_FLAG_WHOLE_MSG;
    am.cb = &UcxRail::OnMessage;
    am.arg = &rail->handlers_[i];
    KVT_RETURN_IF_ERROR(
        UcsToStatus(ucp_worker_set_am_recv_handler(worker, &am), "ucp_worker_set_am_recv_handler"));
  }

  return rail;
}

UcxRail::UcxRail(int index, RailEventSink* sink) : index_(index), sink_(sink) {}

UcxRail::~UcxRail() { Stop(kDefaultStopLimit); }

void UcxRail::Queue(Op op) {
  {
    internal::MutexLock lock(&mu_);
    if (stopping_) return;
    ops_.push_back(std::move(op));
  }
  WakeIfSleeping();
}

void UcxRail::WakeIfSleeping() {
  // The driver sets `sleeping_` before its last look at the queue, so an operation queued after that look finds
  // it set and wakes the poll.
  if (wake_fd_ >= 0 && sleeping_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));  // a full counter is awake anyway
  }
}

void UcxRail::SleepOnEvents() {
  sleeping_.store(true, std::memory_order_seq_cst);
  bool idle;
  {
    internal::MutexLock lock(&mu_);
    idle = !stopping_ && ops_.empty();
  }
  // UCS_ERR_BUSY: events came in since the last progress; the loop drives them instead of sleeping.
  if (idle && ucp_worker_arm(worker_.get()) == UCS_OK) {
    pollfd fds[2] = {{event_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, kArmedSleepMs) > 0 && (fds[1].revents & POLLIN) != 0) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = read(wake_fd_, &count, sizeof(count));
    }
  }
  sleeping_.store(false, std::memory_order_seq_cst);
}

void UcxRail::Open(uint64_t token, std::string remote) {
  Op op{Op::Type::kOpen};
  op.token = token;
  op.remote = std::move(remote);
  Queue(std::move(op));
}

UcxRail::Op UcxRail::SendOp(uint64_t token, unsigned am_id, absl::Span<const uint8_t> header) {
  Op op{Op::Type::kSend};
  op.token = token;
  op.am_id = am_id;
  // The wire checks the size (kMaxAmHeaderBytes); a larger header here is cut, and fails the peer's checks.
  op.header.size = std::min(kMaxAmHeaderBytes, kTokenBytes + header.size());
  std::memcpy(op.header.bytes.data(), &token, kTokenBytes);
  if (!header.empty()) std::memcpy(op.header.bytes.data() + kTokenBytes, header.data(), op.header.size - kTokenBytes);
  return op;
}

void UcxRail::Send(uint64_t token, unsigned am_id, absl::Span<const uint8_t> header,
                   absl::Span<const uint8_t> payload, uint64_t cookie) {
  Op op = SendOp(token, am_id, header);
  op.source = payload.empty() ? nullptr : payload.data();
  op.length = payload.size();
  op.cookie = cookie;
  Queue(std::move(op));
}

void UcxRail::SendOwned(uint64_t token, unsigned am_id, std::string payload) {
  Op op = SendOp(token, am_id, {});
  op.report = false;
  op.owned = std::move(payload);
  Queue(std::move(op));
}

void UcxRail::Receive(void* rendezvous, uint8_t* dest, size_t length, uint64_t cookie) {
  Op op{Op::Type::kReceive};
  op.rendezvous = rendezvous;
  op.dest = dest;
  op.length = length;
  op.cookie = cookie;
  Queue(std::move(op));
}

void UcxRail::Release(void* rendezvous) {
  Op op{Op::Type::kRelease};
  op.rendezvous = rendezvous;
  Queue(std::move(op));
}

void UcxRail::Close(uint64_t token) {
  Op op{Op::Type::kClose};
  op.token = token;
  Queue(std::move(op));
}

int UcxRail::RunOps() {
  std::vector<Op> ops;
  {
    internal::MutexLock lock(&mu_);
    ops.swap(ops_);
  }
  for (Op& op : ops) RunOp(op);
  return static_cast<int>(ops.size());
}

void UcxRail::RunOp(Op& op) {
  switch (op.type) {
    case Op::Type::kOpen:
      DoOpen(op);
      break;
    case Op::Type::kSend:
      DoSend(op);
      break;
    case Op::Type::kReceive:
      DoReceive(op);
      break;
    case Op::Type::kRelease:
      ucp_am_data_release(worker_.get(), op.rendezvous);
      break;
    case Op::Type::kClose: {
      auto it = endpoints_.find(op.token);
      if (it != endpoints_.end()) CloseEndpoint(*it->second);
      break;
    }
  }
}

void UcxRail::DoOpen(Op& op) {
  if (endpoints_.contains(op.token)) return;
  auto e = std::make_unique<Endpoint>();
  e->rail = this;
  e->token = op.token;
  ucp_ep_params_t params = {};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(op.remote.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxRail::OnEndpointError;
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
  if (status != UCS_OK) {
    e->closed = true;  // kept, so that later sends on the token fail instead of opening nothing
    endpoints_[op.token] = std::move(e);
    ReportEndpointError(op.token, UcsToStatus(status, absl::StrCat("ucp_ep_create on rail ", index_)));
    return;
  }
  e->ep = ep;
  endpoints_[op.token] = std::move(e);
}

void UcxRail::DoSend(Op& op) {
  auto done = [&](absl::Status status) {
    if (op.report) Report(RailEvent::Type::kSendDone, op.cookie, std::move(status));
  };
  auto it = endpoints_.find(op.token);
  if (it == endpoints_.end() || it->second->closed) {
    done(absl::FailedPreconditionError(absl::StrCat("link is closed on rail ", index_)));
    return;
  }
  auto* ctx = new RequestContext{this, op.cookie, op.report, op.header, std::move(op.owned)};
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxRail::OnSendComplete;
  param.user_data = ctx;
  const void* payload = op.source;
  size_t length = op.length;
  if (!ctx->owned.empty()) {
    payload = ctx->owned.data();
    length = ctx->owned.size();
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
  }
  ucs_status_ptr_t r = ucp_am_send_nbx(it->second->ep, op.am_id, ctx->header.bytes.data(), ctx->header.size,
                                       payload, length, &param);
  if (UCS_PTR_IS_ERR(r)) {
    delete ctx;
    done(UcsToStatus(UCS_PTR_STATUS(r), "ucp_am_send_nbx"));
    return;
  }
  messages_sent_.fetch_add(1, std::memory_order_relaxed);
  payload_bytes_sent_.fetch_add(length, std::memory_order_relaxed);
  if (r == nullptr) {
    done(absl::OkStatus());  // done at once: reported as a callback would
    delete ctx;
    return;
  }
  live_requests_.insert(ctx);
}

void UcxRail::DoReceive(Op& op) {
  auto* ctx = new RequestContext{this, op.cookie, true, {}};
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &UcxRail::OnRecvComplete;
  param.user_data = ctx;
  ucs_status_ptr_t r =
      ucp_am_recv_data_nbx(worker_.get(), op.rendezvous, op.dest, op.length, &param);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    delete ctx;
    Report(RailEvent::Type::kPayloadRead, op.cookie,
           r == nullptr ? absl::OkStatus() : UcsToStatus(UCS_PTR_STATUS(r), "ucp_am_recv_data_nbx"));
    return;
  }
  live_requests_.insert(ctx);
}

ucs_status_t UcxRail::OnMessage(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param) {
  const auto* handler = static_cast<const Handler*>(arg);
  UcxRail* rail = handler->rail;
  // A message without a token names no link; the wire would drop it, so it is dropped here.
  if (header_length < kTokenBytes || header_length > kMaxAmHeaderBytes) return UCS_OK;
  RailEvent ev;
  ev.type = RailEvent::Type::kMessage;
  ev.rail = rail->index_;
  std::memcpy(&ev.token, header, kTokenBytes);
  ev.am_id = handler->am_id;
  ev.header.size = header_length - kTokenBytes;
  std::memcpy(ev.header.bytes.data(), static_cast<const uint8_t*>(header) + kTokenBytes, ev.header.size);
  ev.length = length;
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (rendezvous) {
    ev.rendezvous = data;
  } else if (length > 0) {
    ev.data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + length);
  }
  rail->sink_->Post(std::move(ev));
  // A rendezvous descriptor persists until the wire hands it back (Receive or Release).
  return rendezvous ? UCS_INPROGRESS : UCS_OK;
}

void UcxRail::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* e = static_cast<Endpoint*>(arg);
  if (!e->closed) e->rail->ReportEndpointError(e->token, UcsToStatus(status, "UCX endpoint"));
}

void UcxRail::Report(RailEvent::Type type, uint64_t cookie, absl::Status status) {
  RailEvent ev;
  ev.type = type;
  ev.rail = index_;
  ev.cookie = cookie;
  ev.status = std::move(status);
  sink_->Post(std::move(ev));
}

void UcxRail::ReportEndpointError(uint64_t token, absl::Status status) {
  RailEvent ev;
  ev.type = RailEvent::Type::kEndpointError;
  ev.rail = index_;
  ev.token = token;
  ev.status = std::move(status);
  sink_->Post(std::move(ev));
}

void UcxRail::FinishRequest(void* request, RequestContext* ctx, RailEvent::Type type, absl::Status status) {
  UcxRail* rail = ctx->rail;
  if (ctx->report && !rail->stopped_) rail->Report(type, ctx->cookie, std::move(status));
  rail->live_requests_.erase(ctx);
  delete ctx;
  ucp_request_free(request);
}

void UcxRail::OnSendComplete(void* request, ucs_status_t status, void* user_data) {
  FinishRequest(request, static_cast<RequestContext*>(user_data), RailEvent::Type::kSendDone,
                UcsToStatus(status, "UCX send"));
}

void UcxRail::OnRecvComplete(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  FinishRequest(request, static_cast<RequestContext*>(user_data), RailEvent::Type::kPayloadRead,
                UcsToStatus(status, "UCX receive"));
}

void UcxRail::CloseEndpoint(Endpoint& e) {
  if (e.closed) return;
  e.closed = true;
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(e.ep, &param);
  e.ep = nullptr;
  // The record goes once UCX has finished closing (no error callback can name it after that); meanwhile it makes
  // sends on the token fail.
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
    close_requests_.push_back({r, e.token});
  } else {
    finished_closes_.push_back(e.token);
  }
}

int UcxRail::PollCloses() {
  int done = 0;
  for (auto it = close_requests_.begin(); it != close_requests_.end();) {
    if (ucp_request_check_status(it->first) != UCS_INPROGRESS) {
      ucp_request_free(it->first);
      finished_closes_.push_back(it->second);
      it = close_requests_.erase(it);
      ++done;
    } else {
      ++it;
    }
  }
  return done;
}

void UcxRail::ForgetClosedEndpoints() {
  for (uint64_t token : finished_closes_) {
    auto it = endpoints_.find(token);
    if (it != endpoints_.end() && it->second->closed) endpoints_.erase(it);
  }
  finished_closes_.clear();
}

int UcxRail::Drive() {
  int work = RunOps();
  for (int i = 0; i < kMaxPollsPerDrive && ucp_worker_progress(worker_.get()) > 0; ++i) ++work;
  if (!close_requests_.empty()) work += PollCloses();
  if (!finished_closes_.empty()) ForgetClosedEndpoints();
  return work;
}

void UcxRail::Start() {
  thread_ = std::thread([this] {
    const std::string name = absl::StrCat("kvt-ucx-rail", index_);
    pthread_setname_np(pthread_self(), name.c_str());  // names it in perf, top -H and /proc
    Loop();
  });
}

void UcxRail::Loop() {
  int idle = 0;
  while (true) {
    {
      internal::MutexLock lock(&mu_);
      if (stopping_) return;
      if (idle >= kIdleSpins && wake_fd_ < 0) {
        mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !ops_.empty(); },
                             kIdleSleep);
        if (stopping_) return;
      }
    }
    if (idle >= kIdleSpins && wake_fd_ >= 0) SleepOnEvents();
    idle = Drive() > 0 ? 0 : idle + 1;
  }
}

void UcxRail::Stop(absl::Duration limit) {
  if (stopped_) return;
  {
    internal::MutexLock lock(&mu_);
    stopping_ = true;
    ops_.clear();
  }
  WakeIfSleeping();
  if (thread_.joinable()) thread_.join();
  stopped_ = worker_ == nullptr;  // Create failed before the worker existed: nothing to close
  if (stopped_) {
    context_.reset();
    return;
  }
  for (auto& [token, e] : endpoints_) CloseEndpoint(*e);
  const absl::Time give_up = absl::Now() + limit;
  while (!close_requests_.empty() && absl::Now() < give_up) {
    ucp_worker_progress(worker_.get());
    PollCloses();
  }
  if (!close_requests_.empty()) {
    Logger("transport")->warn("{} UCX endpoint closes did not finish on rail {}", close_requests_.size(), index_);
  }
  for (auto& [request, token] : close_requests_) ucp_request_free(request);
  close_requests_.clear();
  // Completions from here on (cancelled sends and receives) are not reported: the wire is going away.
  stopped_ = true;
  for (int i = 0; i < 100 && ucp_worker_progress(worker_.get()) > 0; ++i) {
  }
  worker_.reset();
  context_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = event_fd_ = -1;
  for (RequestContext* ctx : live_requests_) delete ctx;
  live_requests_.clear();
}

}  // namespace kvt::transport::internal
