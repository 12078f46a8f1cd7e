// The decode side of kvtd: Expect(request, destination blocks) and the peer's OpenTransfer meet on the request
// id (whichever comes first waits, up to its deadline); then the data plane writes every layer's streams into
// the request's layer inboxes and one pump thread routes the news of each chunk to its InboundRequest
// (inbound_request.h), which decodes what has landed into the engine's blocks: anchor-decoded values first,
// overwritten at full precision when the residual lands. The pump also enforces deadlines and fails requests
// whose prefill daemon stopped answering. Thread-safe.
#ifndef KVT_SERVER_DECODE_SIDE_H_
#define KVT_SERVER_DECODE_SIDE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "codec/scheme.h"
#include "common/mutex.h"
#include "server/daemon_context.h"
#include "server/inbound_request.h"

namespace kvt::server {

class DecodeSide {
 public:
  // Starts the receive pump.
  explicit DecodeSide(DaemonContext* context);
  // Fails every live request (CANCELLED, peers told), stops the pump, waits for running decodes.
  ~DecodeSide();

  // Publishes an expected request. NOT_FOUND (region), INVALID_ARGUMENT (blocks), ALREADY_EXISTS,
  // RESOURCE_EXHAUSTED.
  absl::Status Expect(const ExpectArgs& args);

  // Rendezvous with Expect (waits until `wait_until` for it), checks the source's plan against ours, announces
  // the layers' transfers to the data plane. Returns the first transfer id (layer l = first + l).
  absl::StatusOr<uint64_t> Open(const OpenArgs& args, absl::Time wait_until);

  // Cancels a live request here and, when `notify_peer`, on the prefill daemon. NOT_FOUND if not live.
  absl::Status Cancel(const std::string& request_id, const absl::Status& why, bool notify_peer);

 private:
  struct Route {
    std::shared_ptr<InboundRequest> request;
    uint32_t layer = 0;
  };

  // What a request's end calls back into: this side while it lives. A request whose last decode returns after the
  // side is gone (its end is published when its decodes finish, maybe on a pool the daemon stops later) finds
  // nothing to tell.
  struct Alive {
    kvt::Mutex mu;
    DecodeSide* side ABSL_GUARDED_BY(mu) = nullptr;
  };

  void Pump();
  void CheckDeadlines();
  void Forget(const InboundRequest& request);

  DaemonContext* const context_;
  const std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();

  kvt::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<InboundRequest>> requests_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Route> routes_ ABSL_GUARDED_BY(mu_);
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);  // transfer ids: random, so two decode daemons never collide on a sender

  std::atomic<bool> stopping_{false};
  std::thread pump_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_DECODE_SIDE_H_
