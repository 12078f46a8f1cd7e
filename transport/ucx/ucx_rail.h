// One rail of a UcxWire: a UCX context and worker of its own, the endpoints on that worker, and the operations
// queued for it. A wire with several rails stripes each link's chunks over them, each rail driven by a thread of
// its own, so that the copies UCX makes for a link (what bounds one worker's goodput: docs/BENCHMARKS.md, "Where
// the time goes") run on several cores on each side. A wire with one rail drives it inline, from its Progress.
//
// The rail knows links only by their 64-bit token (ucx_wire.h): it opens, uses and closes one endpoint per token,
// and reports every message that arrives, with the token it carries, to its RailEventSink; the wire decides what
// a token means.
//
// Threading: the operation calls (Connect ... Close) and the accessors may be called from any thread; the rail
// carries operations out in the order they were queued, on its driver (its own thread after Start, or the caller
// of Drive), which is also the only thread that calls UCX and the sink. Stop and the destructor run on the thread
// that owns the rail, after which no event is reported.
#ifndef KVT_TRANSPORT_UCX_UCX_RAIL_H_
#define KVT_TRANSPORT_UCX_UCX_RAIL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/internal/mutex.h"
#include "transport/options.h"
#include "transport/ucx/ucx_handles.h"

namespace kvt::transport::internal {

// Most rails a wire has: one per UCX worker.
inline constexpr int kMaxUcxRails = kMaxUcxWorkers;

// Active-message ids on a rail's worker.
inline constexpr unsigned kChunkAmId = 1;
inline constexpr unsigned kControlAmId = 2;
inline constexpr unsigned kConnectAmId = 3;
// The token every message carries ahead of its kvt header.
inline constexpr size_t kTokenBytes = 8;
// Largest AM header: the token and the largest kvt header.
inline constexpr size_t kMaxAmHeaderBytes = 64;

// An AM header held by value (no allocation per message).
struct AmHeader {
  std::array<uint8_t, kMaxAmHeaderBytes> bytes{};
  size_t size = 0;
  absl::Span<const uint8_t> span() const { return absl::MakeConstSpan(bytes.data(), size); }
};

// What a rail reports to its wire.
// Whether a UCX_TLS list names shared-memory transports only (shm, sm, posix, sysv, cma, knem, xpmem, mm, self),
// where UCX 1.13 has no peer failure handling: rails then open endpoints without asking for it, rather than
// asking, being refused (UCX logs an ERROR for each refusal) and asking again. Such links notice a lost peer by
// the engine's heartbeats. An empty list (UCX's default: every transport) or an exclusion ("^...") is not.
bool SharedMemoryOnly(absl::string_view ucx_tls);

struct RailEvent {
  enum class Type {
    kMessage,        // an active message arrived
    kSendDone,       // a Send with report=true finished (status says how)
    kPayloadRead,    // a Receive finished
    kEndpointError,  // UCX failed the endpoint of `token`
  };
  Type type = Type::kMessage;
  int rail = 0;
  uint64_t token = 0;   // kMessage (0 when the header had none), kEndpointError
  uint64_t cookie = 0;  // kSendDone, kPayloadRead
  // kMessage: the AM id, the header after the token, and the payload: either copied out of UCX (`data`) or, for a
  // rendezvous, a descriptor the wire must hand back through Receive or Release on this rail.
  unsigned am_id = 0;
  AmHeader header;
  std::vector<uint8_t> data;
  void* rendezvous = nullptr;
  size_t length = 0;
  absl::Status status;  // kSendDone, kPayloadRead, kEndpointError
};

class RailEventSink {
 public:
  virtual ~RailEventSink() = default;
  // Called on the rail's driver, once per event, in the order the rail saw them.
  virtual void Post(RailEvent event) = 0;
};

class UcxRail {
 public:
  // Creates the rail's context (options.ucx_tls / ucx_net_devices applied through ucp_config_modify) and worker.
  static absl::StatusOr<std::unique_ptr<UcxRail>> Create(int index, const Options& options, RailEventSink* sink);
  ~UcxRail();  // Stop(kDefaultStopLimit) if not stopped

  int index() const { return index_; }
  // Raw bytes of this rail's UCX worker address.
  const std::string& worker_address() const { return worker_address_; }

  // Operations, queued; carried out on the driver in order.
  // Opens the endpoint of `token` to `remote` (a UCX worker address). An endpoint that cannot be opened is reported
  // as kEndpointError.
  void Open(uint64_t token, std::string remote);
  // Sends one active message on the endpoint of `token`: header = token + `header` (copied now), payload =
  // `payload` (must stay valid until kSendDone). A send on a token with no open endpoint fails (kSendDone with
  // FAILED_PRECONDITION).
  void Send(uint64_t token, unsigned am_id, absl::Span<const uint8_t> header, absl::Span<const uint8_t> payload,
            uint64_t cookie);
  // Sends a small message whose payload the rail keeps until UCX is done with it, forced eager (so that it is
  // whole in the receiver's callback, however UCX's rendezvous threshold is set); reports nothing.
  void SendOwned(uint64_t token, unsigned am_id, std::string payload);
  // Receives a rendezvous payload (from a kMessage of this rail) into dest[0, length); kPayloadRead follows.
  void Receive(void* rendezvous, uint8_t* dest, size_t length, uint64_t cookie);
  // Drops a rendezvous payload nobody will read.
  void Release(void* rendezvous);
  // Closes the endpoint of `token` (idempotent); its pending sends finish with errors.
  void Close(uint64_t token);

  // Inline driving: carries out queued operations and polls UCX once; returns how much work it did (0 = idle).
  int Drive();
  // Starts the rail's own thread, which drives it (and sleeps briefly when idle) until Stop.
  void Start();
  // Stops the thread (if any), closes every endpoint, lets UCX finish the closes for at most `limit`, and destroys
  // the worker and context; operations still queued are dropped. Idempotent.
  void Stop(absl::Duration limit);

  // Messages this rail sent (every AM id) and payload bytes it put on its endpoints; for tests and the bench.
  uint64_t messages_sent() const { return messages_sent_.load(std::memory_order_relaxed); }
  uint64_t payload_bytes_sent() const { return payload_bytes_sent_.load(std::memory_order_relaxed); }

  static constexpr absl::Duration kDefaultStopLimit = absl::Seconds(2);

 private:
  struct Op {
    enum class Type { kOpen, kSend, kReceive, kRelease, kClose } type;
    uint64_t token = 0;
    std::string remote;                                    // kOpen
    unsigned am_id = 0;                                    // kSend
    AmHeader header;                                       // kSend: token + kvt header
    const uint8_t* source = nullptr;                       // kSend
    uint8_t* dest = nullptr;                               // kReceive
    size_t length = 0;
    uint64_t cookie = 0;
    bool report = true;
    std::string owned;  // kSend from SendOwned: the payload itself
    void* rendezvous = nullptr;  // kReceive, kRelease
  };
  struct RequestContext;
  struct Endpoint;
  // The argument of an AM handler: which rail, which id.
  struct Handler {
    UcxRail* rail = nullptr;
    unsigned am_id = 0;
  };

  UcxRail(int index, RailEventSink* sink);

  // A kSend operation with its AM header (token + `header`) filled in.
  static Op SendOp(uint64_t token, unsigned am_id, absl::Span<const uint8_t> header);
  void Queue(Op op);
  // Events, posted to the sink on the driver.
  void Report(RailEvent::Type type, uint64_t cookie, absl::Status status);
  void ReportEndpointError(uint64_t token, absl::Status status);
  int RunOps();
  void RunOp(Op& op);
  void DoOpen(Op& op);
  void DoSend(Op& op);
  void DoReceive(Op& op);
  void CloseEndpoint(Endpoint& e);
  int PollCloses();
  void ForgetClosedEndpoints();
  void Loop();
  // The rail's thread, idle: arms the worker and sleeps in poll() on UCX's event descriptor and wake_fd_, for at
  // most a few ms (needs wake_fd_ >= 0).
  void SleepOnEvents();
  // From any thread: ends a SleepOnEvents poll if one may be under way.
  void WakeIfSleeping();

  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // Reports a finished request (if owed and not stopped) and frees it and its context.
  static void FinishRequest(void* request, RequestContext* ctx, RailEvent::Type type, absl::Status status);
  static void OnSendComplete(void* request, ucs_status_t status, void* user_data);
  static void OnRecvComplete(void* request, ucs_status_t status, size_t length, void* user_data);

  const int index_;
  RailEventSink* const sink_;
  std::string worker_address_;
  std::array<Handler, 3> handlers_{};  // one per AM id; UCX holds pointers to them

  internal::Mutex mu_;
  std::vector<Op> ops_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> messages_sent_{0};
  std::atomic<uint64_t> payload_bytes_sent_{0};

  // Driver state. Released in reverse order: the worker before the context.
  UcpContext context_;
  UcpWorker worker_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Endpoint>> endpoints_;
  std::vector<std::pair<void*, uint64_t>> close_requests_;  // (request, token): the endpoint goes when it is done
  std::vector<uint64_t> finished_closes_;                   // tokens whose endpoint may go now
  // Operations UCX has not completed; their contexts are freed here if the worker goes first.
  absl::flat_hash_set<RequestContext*> live_requests_;
  // Set from the start for a shared-memory-only UCX_TLS (SharedMemoryOnly), or once ucp_ep_create refused peer
  // failure handling (shared memory in UCX 1.13), to skip asking again.
  bool peer_failure_handling_unsupported_ = false;
  bool stopped_ = false;
  std::thread thread_;
  // With UCX's wakeup feature (threaded rails): the worker's event descriptor, an eventfd that Queue and Stop write
  // to end the thread's idle poll, and whether the thread may be in it. -1: polling with timed sleeps instead.
  int event_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> sleeping_{false};
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_UCX_UCX_RAIL_H_
