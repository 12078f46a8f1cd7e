// A Wire over UCX ucp active messages, striped over one or more rails (ucx_rail.h): a rail is a UCX context and
// worker with its own endpoints, and, when there is more than one, its own thread. Options::ucx_workers says how
// many. The address lists every rail's worker address ("ucx:" + hex, rails separated by "."), which a peer gets out
// of band (the control plane's hello); connecting by worker address, rather than through UCX's sockaddr connection
// manager, lets UCX pick any transport it has, shared memory included (UCX 1.13 offers no shm lanes to sockaddr
// endpoints).
//
// Protocol: the connecting side uses n = min(its rails, the peer's) rails for the link; it picks a random 64-bit
// link token, opens an endpoint from each of its first n rails to the same rail of the peer, and sends the token
// with the worker addresses of those n rails on rail 0 (AM id 3). The other side opens an endpoint back from each
// of its rails to each address. Every later message (chunks: AM id 1, control: AM id 2) carries the token ahead of
// the kvt header in the AM header, which is how a receiver knows the link a message belongs to. Control messages
// travel on rail 0, in order; each chunk goes on the rail with the fewest payload bytes in flight (chunks carry
// their own offsets, so their order does not matter). A large chunk payload goes by UCX rendezvous straight into
// the receiver's buffer, copied by the receiving rail's thread. Endpoints use peer error handling where UCX has
// it, so a lost peer is reported as OnLinkDown.
//
// Threading: as every Wire, the Wire calls are made on the engine's progress thread and WireEvents are called
// back from inside Progress() there. Rails report to the wire through a queue that Progress drains.
#ifndef KVT_TRANSPORT_UCX_UCX_WIRE_H_
#define KVT_TRANSPORT_UCX_UCX_WIRE_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "transport/internal/mutex.h"
#include "transport/internal/wire.h"
#include "transport/options.h"
#include "transport/ucx/ucx_rail.h"

namespace kvt::transport::internal {

class UcxWire final : public Wire, private RailEventSink {
 public:
  // Creates options.ucx_workers rails (starting their threads when there are several). `wake`, if set, is called
  // from a rail thread when it has queued something for Progress. Call on the progress thread.
  static absl::StatusOr<std::unique_ptr<UcxWire>> Create(const Options& options, WireEvents* events,
                                                         std::function<void()> wake = nullptr);
  // Stops every rail (closing its endpoints; bounded), so no UCX operation outlives the wire.
  ~UcxWire() override;

  std::string address() const override { return address_; }
  absl::StatusOr<LinkId> Connect(const std::string& address) override;
  absl::Status Send(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, uint64_t cookie) override;
  void Close(LinkId link) override;
  int Progress() override;
  absl::Duration idle_poll_interval() const override { return absl::Microseconds(200); }
  // One rail is one FIFO path per link; several are not.
  bool ordered() const override { return rails_.size() == 1; }

  int rail_count() const { return static_cast<int>(rails_.size()); }
  // How many rails `link` stripes over (0 for an unknown link).
  int link_rails(LinkId link) const;
  const UcxRail& rail(int i) const { return *rails_[i]; }

 private:
  // An open link (a closed one is forgotten: sends on it fail, its messages are dropped).
  struct Link {
    LinkId id = 0;
    uint64_t token = 0;
    int rails = 0;
  };
  struct SendRecord {
    int rail = 0;
    size_t bytes = 0;
  };
  class Payload;

  UcxWire(WireEvents* events, std::function<void()> wake) : events_(events), wake_(std::move(wake)) {}

  // RailEventSink: on a rail's driver.
  void Post(RailEvent event) override;

  void HandleEvent(RailEvent& event);
  void HandleConnect(RailEvent& event);
  void HandleMessage(RailEvent& event);
  void Drop(const RailEvent& event);
  // Registers a link of `token` whose rail i reaches remote[i] (one per rail it uses), opening the endpoints.
  LinkId AddLink(uint64_t token, std::vector<std::string> remote);
  void CloseLink(LinkId id);
  Link* FindLink(LinkId id);
  int PickRail(const Link& link) const;

  WireEvents* const events_;
  const std::function<void()> wake_;
  std::vector<std::unique_ptr<UcxRail>> rails_;
  bool threaded_ = false;  // rails run on their own threads
  std::string address_;

  internal::Mutex mu_;
  std::deque<RailEvent> queue_ ABSL_GUARDED_BY(mu_);

  // Progress-thread state.
  LinkId next_link_ = 1;
  absl::flat_hash_map<LinkId, std::unique_ptr<Link>> links_;
  absl::flat_hash_map<uint64_t, LinkId> by_token_;
  std::deque<LinkId> outbound_up_;  // links from Connect, reported up on the next Progress
  absl::flat_hash_map<uint64_t, SendRecord> sends_;  // cookie -> where it went, until its kSendDone
  std::vector<uint64_t> rail_bytes_in_flight_;
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_UCX_UCX_WIRE_H_
