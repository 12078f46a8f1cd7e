#include "collective/ucx_wire.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "transport/ucx/ucx_status.h"
#include "transport/ucx/ucx_worker.h"
#include "ucp/api/ucp.h"

namespace kvt::collective {
namespace {

using ::kvt::transport::internal::UcsToStatus;

constexpr int kRankShift = 48;
constexpr uint64_t kSequenceMask = (uint64_t{1} << kRankShift) - 1;
constexpr int kMaxRanks = 1 << 15;
constexpr absl::Duration kCloseDrain = absl::Seconds(2);

uint64_t MessageTag(int src, uint64_t sequence) {
  return (static_cast<uint64_t>(src) << kRankShift) | (sequence & kSequenceMask);
}

// Progresses `worker` once; when nothing moved, gives the core away briefly (ranks may share cores).
void ProgressOrYield(ucp_worker_h worker, int& idle) {
  if (ucp_worker_progress(worker) != 0) {
    idle = 0;
    return;
  }
  if (++idle < 64) {
    std::this_thread::yield();
  } else {
    absl::SleepFor(absl::Microseconds(50));
  }
}

}  // namespace

// The worker, the endpoints and the sends in flight. Invariant: pending_ holds every send request UCX has not
// completed, each with the bytes it reads; peer_error_[p] turns non-OK once, when p's endpoint fails.
//
// A send may need its sender's progress to finish (rendezvous, or a full shared-memory FIFO) after Send has
// returned and while the caller computes, so a progress thread drives the worker whenever Send and Receive
// are not: the worker is UCS_THREAD_MODE_SERIALIZED and every UCX call holds mu_.
class UcxWire::Mesh {
 public:
  Mesh(int rank, int world_size)
      : rank_(rank),
        world_size_(world_size),
        endpoints_(world_size, nullptr),
        send_sequence_(world_size, 0),
        receive_sequence_(world_size, 0),
        peer_error_(world_size),
        error_args_(world_size) {}

  ~Mesh() {
    if (progress_thread_.joinable()) {
      stop_.store(true);
      progress_thread_.join();
    }
    if (worker_ == nullptr) return;  // Init failed before the worker existed
    int idle = 0;
    const absl::Time drain = absl::Now() + kCloseDrain;
    while (!pending_.empty() && absl::Now() < drain) {
      ProgressOrYield(worker_.get(), idle);
      ReapSends();
    }
    // Close the endpoints: flushing, or by force where a send is still stuck (a peer that stopped receiving).
    std::vector<bool> stuck(world_size_, false);
    for (const Pending& p : pending_) stuck[p.dst] = true;
    std::vector<void*> closing;
    for (int peer = 0; peer < world_size_; ++peer) {
      if (endpoints_[peer] == nullptr) continue;
      ucp_request_param_t param = {};
      if (stuck[peer]) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      }
      ucs_status_ptr_t r = ucp_ep_close_nbx(endpoints_[peer], &param);
      if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
    }
    const absl::Time close_deadline = absl::Now() + kCloseDrain;
    while (!closing.empty() && absl::Now() < close_deadline) {
      ProgressOrYield(worker_.get(), idle);
      ReapSends();
      for (size_t i = 0; i < closing.size();) {
        if (ucp_request_check_status(closing[i]) != UCS_INPROGRESS) {
          ucp_request_free(closing[i]);
          closing[i] = closing.back();
          closing.pop_back();
        } else {
          ++i;
        }
      }
    }
    ReapSends();
    if (!closing.empty() || !pending_.empty()) {
      // UCX asserts when a worker goes with requests outstanding; leaking it (and the bytes those requests
      // read) is the lesser harm, and only happens when a peer hung.
      (void)worker_.release();
      (void)context_.release();
      for (Pending& p : pending_) (void)new std::vector<uint8_t>(std::move(p.bytes));
      return;
    }
    worker_.reset();
    context_.reset();
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  absl::Status Init(const UcxWireOptions& options, CollectiveWire& bootstrap) {
    KVT_ASSIGN_OR_RETURN(transport::internal::UcxWorker made,
                         transport::internal::CreateUcxWorker({.tls = options.tls,
                                                               .net_devices = options.net_devices,
                                                               .features = UCP_FEATURE_TAG,
                                                               .thread_mode = UCS_THREAD_MODE_SERIALIZED}));
    context_ = std::move(made.context);
    worker_ = std::move(made.worker);
    const std::vector<uint8_t> mine(made.address.begin(), made.address.end());

    // All-gather of the worker addresses: a length, then the bytes, to every peer.
    const absl::Time deadline = absl::Now() + options.bootstrap_timeout;
    const uint64_t length = mine.size();
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      KVT_RETURN_IF_ERROR(bootstrap.Send(
          peer, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&length), sizeof(length)), deadline));
      KVT_RETURN_IF_ERROR(bootstrap.Send(peer, mine, deadline));
    }
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      uint64_t theirs = 0;
      KVT_RETURN_IF_ERROR(bootstrap.Receive(
          peer, absl::MakeSpan(reinterpret_cast<uint8_t*>(&theirs), sizeof(theirs)), deadline));
      if (theirs == 0 || theirs > (1u << 20)) {
        return absl::DataLossError(
            absl::StrFormat("rank %d announced a worker address of %d bytes", peer, theirs));
      }
      std::vector<uint8_t> remote(theirs);
      KVT_RETURN_IF_ERROR(bootstrap.Receive(peer, absl::MakeSpan(remote), deadline));
      KVT_RETURN_IF_ERROR(Connect(peer, reinterpret_cast<const ucp_address_t*>(remote.data())));
    }
    progress_thread_ = std::thread([this] { ProgressLoop(); });
    return absl::OkStatus();
  }

  absl::Status Send(int dst, absl::Span<const uint8_t> message, absl::Time /*deadline*/) {
    KVT_RETURN_IF_ERROR(CheckPeer(dst));
    MutexLock lock(&mu_);
    ReapSends();
    if (!peer_error_[dst].ok()) return peer_error_[dst];
    Pending pending{nullptr, std::vector<uint8_t>(message.begin(), message.end())};
    ucp_request_param_t param = {};
    const uint64_t tag = MessageTag(rank_, send_sequence_[dst]++);
    ucs_status_ptr_t r =
        ucp_tag_send_nbx(endpoints_[dst], pending.bytes.data(), pending.bytes.size(), tag, &param);
    if (UCS_PTR_IS_ERR(r)) {
      return UcsToStatus(UCS_PTR_STATUS(r), absl::StrFormat("rank %d sending to rank %d", rank_, dst));
    }
    if (r != nullptr) {
      pending.request = r;
      pending.dst = dst;
      pending_.push_back(std::move(pending));
    }
    ucp_worker_progress(worker_.get());
    return absl::OkStatus();
  }

  absl::Status Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) {
    KVT_RETURN_IF_ERROR(CheckPeer(src));
    MutexLock lock(&mu_);
    const uint64_t tag = MessageTag(src, receive_sequence_[src]);
    ucp_tag_recv_info_t info = {};
    ucp_request_param_t param = {};
    // No immediate completion: UCX 1.13 leaves recv_info unset then, and the length must be checked.
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t r =
        ucp_tag_recv_nbx(worker_.get(), message.data(), message.size(), tag, ~uint64_t{0}, &param);
    if (UCS_PTR_IS_ERR(r)) return Received(src, UCS_PTR_STATUS(r), info, message.size());
    int idle = 0;
    while (true) {
      const ucs_status_t status = ucp_tag_recv_request_test(r, &info);
      if (status != UCS_INPROGRESS) {
        ucp_request_free(r);
        return Received(src, status, info, message.size());
      }
      absl::Status stop;
      if (!peer_error_[src].ok()) {
        stop = peer_error_[src];
      } else if (absl::Now() >= deadline) {
        stop = absl::DeadlineExceededError(
            absl::StrFormat("rank %d: nothing from rank %d by the deadline", rank_, src));
      }
      if (!stop.ok()) {
        ucp_request_cancel(worker_.get(), r);
        while (ucp_tag_recv_request_test(r, &info) == UCS_INPROGRESS) ucp_worker_progress(worker_.get());
        ucp_request_free(r);
        return stop;
      }
      ProgressOrYield(worker_.get(), idle);
      ReapSends();
    }
  }

 private:
  struct Pending {
    void* request;
    std::vector<uint8_t> bytes;  // what the request reads until it completes
    int dst = -1;
  };
  struct ErrorArg {
    Mesh* mesh;
    int peer;
  };

  void ProgressLoop() {
    while (!stop_.load()) {
      unsigned progressed;
      {
        MutexLock lock(&mu_);
        progressed = ucp_worker_progress(worker_.get());
        ReapSends();
      }
      if (progressed == 0) absl::SleepFor(absl::Microseconds(100));
    }
  }

  absl::Status CheckPeer(int peer) const {
    if (peer < 0 || peer >= world_size_ || peer == rank_) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d has no peer %d", rank_, peer));
    }
    return absl::OkStatus();
  }

  absl::Status Connect(int peer, const ucp_address_t* remote) {
    error_args_[peer] = ErrorArg{this, peer};
    ucp_ep_params_t params = {};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = remote;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &Mesh::OnEndpointError;
    params.err_handler.arg = &error_args_[peer];
    ucp_ep_h ep = nullptr;
    ucs_status_t status = ucp_ep_create(worker_.get(), &params, &ep);
    if (status == UCS_ERR_UNREACHABLE) {
      // Shared-memory transports in UCX 1.13 have no peer failure handling: a dead peer shows by the
      // deadline.
      params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      params.field_mask &= ~UCP_EP_PARAM_FIELD_ERR_HANDLER;
      status = ucp_ep_create(worker_.get(), &params, &ep);
    }
    KVT_RETURN_IF_ERROR(UcsToStatus(status, absl::StrFormat("rank %d connecting to rank %d", rank_, peer)));
    endpoints_[peer] = ep;
    return absl::OkStatus();
  }

  static void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* a = static_cast<ErrorArg*>(arg);
    Mesh* mesh = a->mesh;
    if (mesh->peer_error_[a->peer].ok()) {
      mesh->peer_error_[a->peer] = absl::UnavailableError(
          absl::StrFormat("rank %d is gone (%s)", a->peer, UcsToStatus(status, "endpoint").message()));
    }
  }

  // Frees the send requests UCX has completed; a failed one marks its peer.
  void ReapSends() {
    for (size_t i = 0; i < pending_.size();) {
      const ucs_status_t status = ucp_request_check_status(pending_[i].request);
      if (status == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      if (status != UCS_OK && status != UCS_ERR_CANCELED && peer_error_[pending_[i].dst].ok()) {
        peer_error_[pending_[i].dst] =
            absl::UnavailableError(absl::StrFormat("rank %d could not send to rank %d: %s", rank_,
                                                   pending_[i].dst, UcsToStatus(status, "send").message()));
      }
      ucp_request_free(pending_[i].request);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    }
  }

  // The result of a receive that UCX finished.
  absl::Status Received(int src, ucs_status_t status, const ucp_tag_recv_info_t& info, size_t expected) {
    if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) ++receive_sequence_[src];
    if (status == UCS_ERR_MESSAGE_TRUNCATED || (status == UCS_OK && info.length != expected)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d sent rank %d %s bytes where %d were expected", src, rank_,
                          status == UCS_OK ? absl::StrCat(info.length) : std::string("more"), expected));
    }
    return UcsToStatus(status, absl::StrFormat("rank %d receiving from rank %d", rank_, src));
  }

  // Constant after construction
  const int rank_;
  const int world_size_;

  std::atomic<bool> stop_{false};
  std::thread progress_thread_;  // runs from the end of Init to the start of the destructor

  Mutex mu_;
  // State below is used under mu_ while the progress thread runs (UCX calls included)
  transport::internal::UcpContext context_;
  transport::internal::UcpWorker worker_;  // destroyed before the context
  std::vector<ucp_ep_h> endpoints_;  // released in the destructor
  std::vector<uint64_t> send_sequence_;
  std::vector<uint64_t> receive_sequence_;
  std::vector<absl::Status> peer_error_;
  std::vector<ErrorArg> error_args_;  // the endpoints' error handler arguments; never resized after Create
  std::vector<Pending> pending_;
};

absl::StatusOr<std::unique_ptr<UcxWire>> UcxWire::Create(const UcxWireOptions& options,
                                                         CollectiveWire& bootstrap) {
  if (bootstrap.world_size() > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrFormat("UcxWire supports up to %d ranks", kMaxRanks));
  }
  auto mesh = std::make_unique<Mesh>(bootstrap.rank(), bootstrap.world_size());
  KVT_RETURN_IF_ERROR(mesh->Init(options, bootstrap));
  return std::unique_ptr<UcxWire>(new UcxWire(std::move(mesh)));
}

UcxWire::UcxWire(std::unique_ptr<Mesh> mesh) : mesh_(std::move(mesh)) {}
UcxWire::~UcxWire() = default;

int UcxWire::rank() const { return mesh_->rank(); }
int UcxWire::world_size() const { return mesh_->world_size(); }

absl::Status UcxWire::Send(int dst, absl::Span<const uint8_t> message, absl::Time deadline) {
  return mesh_->Send(dst, message, deadline);
}

absl::Status UcxWire::Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) {
  return mesh_->Receive(src, message, deadline);
}

}  // namespace kvt::collective
