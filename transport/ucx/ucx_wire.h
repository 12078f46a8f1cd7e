// A Wire over UCX ucp: one context and one worker, owned by the engine's progress thread, and one endpoint per
// link and side. The address is the worker address ("ucx:" + hex), which a peer gets out of band (the control
// plane's hello); connecting by worker address, rather than through UCX's sockaddr connection manager, lets UCX
// pick any transport it has, shared memory included (UCX 1.13 offers no shm lanes to sockaddr endpoints).
//
// Protocol: the connecting side picks a random 64-bit link token and sends it with its own worker address (AM id
// 3); the other side opens an endpoint back to that address. Every later message (chunks: AM id 1, control: AM
// id 2) carries the token ahead of the kvt header in the AM header, which is how a receiver knows the link a
// message belongs to. A large chunk payload goes by UCX rendezvous straight into the receiver's buffer.
// Endpoints use peer error handling, so a lost peer is reported as OnLinkDown.
// Threading: as every Wire, only on the progress thread. UCX callbacks run inside Progress().
#ifndef KVT_TRANSPORT_UCX_UCX_WIRE_H_
#define KVT_TRANSPORT_UCX_UCX_WIRE_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "transport/internal/wire.h"
#include "transport/options.h"
#include "transport/ucx/ucx_handles.h"

namespace kvt::transport::internal {

class UcxWire final : public Wire {
 public:
  // Reads UCX's configuration, applies options.ucx_tls / ucx_net_devices through ucp_config_modify, creates the
  // context and the worker. Call on the progress thread.
  static absl::StatusOr<std::unique_ptr<UcxWire>> Create(const Options& options, WireEvents* events);
  ~UcxWire() override;

  std::string address() const override { return address_; }
  absl::StatusOr<LinkId> Connect(const std::string& address) override;
  absl::Status Send(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, uint64_t cookie) override;
  void Close(LinkId link) override;
  int Progress() override;
  absl::Duration idle_poll_interval() const override { return absl::Microseconds(200); }

  // A UCX endpoint and what the wire knows of it. Stable address (held by unique_ptr): UCX callbacks point here.
  struct Endpoint {
    UcxWire* wire = nullptr;
    LinkId id = 0;
    uint64_t token = 0;
    ucp_ep_h ep = nullptr;
    bool closed = false;
  };

 private:
  struct Completion {
    enum class Type { kSendDone, kPayloadRead, kLinkUp, kLinkDown } type;
    uint64_t cookie_or_link = 0;
    bool inbound = false;
    absl::Status status;
  };
  struct RequestContext;

  explicit UcxWire(WireEvents* events) : events_(events) {}

  static ucs_status_t OnConnectMessage(void* arg, const void* header, size_t header_length, void* data,
                                       size_t length, const ucp_am_recv_param_t* param);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  class Payload;
  static ucs_status_t OnChunkMessage(void* arg, const void* header, size_t header_length, void* data,
                                     size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnControlMessage(void* arg, const void* header, size_t header_length, void* data,
                                       size_t length, const ucp_am_recv_param_t* param);
  static void OnSendComplete(void* request, ucs_status_t status, void* user_data);
  static void OnRecvComplete(void* request, ucs_status_t status, size_t length, void* user_data);

  absl::StatusOr<Endpoint*> AddEndpoint(const ucp_address_t* remote, uint64_t token);
  void HandleMessage(MessageKind kind, const void* header, size_t header_length, void* data, size_t length,
                     const ucp_am_recv_param_t* param);
  absl::Status SendRaw(Endpoint& e, unsigned am_id, absl::Span<const uint8_t> header,
                       absl::Span<const uint8_t> payload, uint64_t cookie, bool report);
  void CloseEndpoint(Endpoint& e);
  void DrainCloseRequests(absl::Duration limit);

  WireEvents* const events_;
  // Released in reverse order: the worker before the context.
  UcpContext context_;
  UcpWorker worker_;
  std::string worker_address_;  // raw bytes of our ucp worker address, sent to peers that connect
  std::string address_;         // "ucx:" + hex(worker_address_)
  LinkId next_link_ = 1;
  absl::flat_hash_map<LinkId, std::unique_ptr<Endpoint>> endpoints_;
  absl::flat_hash_map<uint64_t, LinkId> by_token_;
  std::deque<Completion> completions_;
  std::vector<void*> close_requests_;
  // Operations UCX has not completed; their contexts are freed here if the worker goes first.
  absl::flat_hash_set<RequestContext*> live_requests_;
  // Set once ucp_ep_create refused peer failure handling (shared memory in UCX 1.13), to skip asking again.
  bool peer_failure_handling_unsupported_ = false;
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_UCX_UCX_WIRE_H_
