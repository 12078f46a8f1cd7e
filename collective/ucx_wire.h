// A CollectiveWire over UCX tag messages, for host memory within a host (shared memory) and across hosts
// (tcp, verbs): the UCX backend of docs/COLLECTIVES.md.
//
// Bootstrap: each rank creates a UCX worker and exchanges its worker address with every other rank over a
// bootstrap CollectiveWire it is given (a TcpWire, or the in-process hub in tests), then creates an endpoint
// to each. Messages from rank s to rank d carry the UCX tag (s << 48 | n), n counting s's messages to d, so
// they are matched whole and in order. A Send copies the message and returns at once (UCX completes it during
// later calls); a Receive progresses the worker until its message is in or the deadline passes, and then
// cancels it. A peer whose endpoint fails (the tcp connection dropped: its process died) turns into
// UNAVAILABLE; transports without peer failure handling (shared memory in UCX 1.13) report a dead peer by the
// deadline.
//
// Threading: one thread at a time calls the wire, as collective_wire.h requires. The wire owns one UCX worker
// and a progress thread that drives it between calls, so sends still in flight when Send returned
// (rendezvous, full shared-memory queues) finish while the caller computes. Libraries do not read the
// environment: UCX's TLS and NET_DEVICES come from UcxWireOptions through ucp_config_modify (tests set
// UCX_MEM_EVENTS=no in their environment).
//   KVT_ASSIGN_OR_RETURN(auto tcp, TcpWire::Create({.rank = rank, .peers = peers}));
//   KVT_ASSIGN_OR_RETURN(auto wire, UcxWire::Create({.tls = "tcp", .net_devices = "lo"}, *tcp));
#ifndef KVT_COLLECTIVE_UCX_WIRE_H_
#define KVT_COLLECTIVE_UCX_WIRE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective_wire.h"

namespace kvt::collective {

struct UcxWireOptions {
  // UCX_TLS, e.g. "tcp" or "posix,tcp"; "" leaves UCX's default (all).
  std::string tls;
  // UCX_NET_DEVICES, e.g. "lo" for tcp on one host; "" leaves UCX's default (all).
  std::string net_devices;
  // How long Create may wait on the bootstrap exchange.
  absl::Duration bootstrap_timeout = absl::Seconds(30);
};

class UcxWire : public CollectiveWire {
 public:
  // Builds this rank's worker and endpoints; `bootstrap` gives the rank and world size and carries the
  // address exchange, and is not used after Create returns. INVALID_ARGUMENT or FAILED_PRECONDITION when UCX
  // rejects the options (an unknown transport, no such device); bootstrap errors as its Send and Receive
  // give.
  static absl::StatusOr<std::unique_ptr<UcxWire>> Create(const UcxWireOptions& options,
                                                         CollectiveWire& bootstrap);

  // Waits up to 2 s for sends still in flight, then closes the endpoints.
  ~UcxWire() override;

  int rank() const override;
  int world_size() const override;
  absl::Status Send(int dst, absl::Span<const uint8_t> message, absl::Time deadline) override;
  absl::Status Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) override;

 private:
  class Mesh;
  explicit UcxWire(std::unique_ptr<Mesh> mesh);

  std::unique_ptr<Mesh> mesh_;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_UCX_WIRE_H_
