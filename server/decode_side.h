// The decode side of kvtd: Expect(request, destination blocks) and the peer's OpenTransfer meet on the request
// id (whichever comes first waits, up to its deadline); then every layer's chunks are received by one pump
// thread, assembled into page containers, decoded on the worker pool and written into the engine's blocks:
// anchor-decoded values first, overwritten at full precision when the residual lands. Per layer the request's
// events say ANCHOR_READY, then FULL_READY; then DONE, or FAILED with the status. Thread-safe.
//
// Invariant: a page's values in the engine's blocks only ever move to more stages (a decode of fewer stages
// never overwrites one of more), and once a request finished nothing new is written into its region (a decode
// already running completes its page; the region is released when the last one returns).
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
#include "absl/status/statusor.h"
#include "absl/random/random.h"
#include "common/mutex.h"
#include "absl/time/time.h"
#include "codec/scheme.h"
#include "server/daemon_context.h"
#include "server/kv_layout.h"
#include "server/transfer_plan.h"

namespace kvt::server {

struct ExpectArgs {
  std::string request_id;
  std::string region_id;
  std::vector<uint32_t> block_ids;
  uint64_t num_tokens = 0;
  std::string source_daemon;  // "" = any
  absl::Duration deadline;
  bool allow_anchor_only = false;
};

// An OpenTransfer from a prefill daemon, its fields' forms checked by the peer service.
struct OpenArgs {
  std::string request_id;
  codec::Scheme scheme;
  KvLayoutSpec source_layout;
  uint64_t num_tokens = 0;
  uint32_t page_tokens = 0;
  int chunk_tokens = 0;
  std::vector<PlannedPage> pages;  // as the source sent them, checked against our own plan
  std::string source_daemon_id;
  std::string source_address;
};

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
  class InboundRequest;
  struct Route {
    std::shared_ptr<InboundRequest> request;
    uint32_t layer = 0;
  };

  void Pump();
  void CheckDeadlines();
  void Forget(const InboundRequest& request);

  DaemonContext* const context_;

  kvt::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<InboundRequest>> requests_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Route> routes_ ABSL_GUARDED_BY(mu_);
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);  // transfer ids: random, so two decode daemons never collide on a sender

  std::atomic<bool> stopping_{false};
  std::thread pump_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_DECODE_SIDE_H_
