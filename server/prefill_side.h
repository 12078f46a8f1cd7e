// The prefill side of kvtd: Offer(request, source blocks, ready layers) reads the engine's KV from a registered
// region, encodes it page by page with the codec (spread over the worker pool, the next layer encoding while the
// previous one is on the wire), opens the transfer on the decode daemon (rendezvous on the request id) and
// sends each layer's anchor and residual streams over the data plane's lanes. Thread-safe.
//
// One OutboundRequest per live request runs on its own thread:
//   dial decode daemon -> OpenTransfer -> for each layer as it becomes ready: encode pages, Send -> wait for
//   every layer's acknowledgement -> DONE (or FAILED, after cancelling the rest here and on the peer).
#ifndef KVT_SERVER_PREFILL_SIDE_H_
#define KVT_SERVER_PREFILL_SIDE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "absl/time/time.h"
#include "codec/scheme.h"
#include "server/daemon_context.h"

namespace kvt::server {

// A validated Offer (the service edge checks the fields' forms; the side checks them against the region).
struct OfferArgs {
  std::string request_id;
  std::string region_id;
  std::vector<uint32_t> block_ids;
  uint64_t num_tokens = 0;
  std::vector<uint32_t> ready_layers;
  codec::Scheme scheme;
  std::string decode_daemon;  // host:port of its peer service
  absl::Duration deadline;
};

class PrefillSide {
 public:
  explicit PrefillSide(DaemonContext* context);
  // Cancels every live request (CANCELLED, peers told) and joins their threads.
  ~PrefillSide();

  // First Offer of a request: checks region, blocks, layers and scheme, publishes the request and starts it.
  // Later Offers of a live request add ready layers (its region, blocks and scheme must match).
  // INVALID_ARGUMENT / NOT_FOUND / ALREADY_EXISTS / RESOURCE_EXHAUSTED with a message that says what is wrong.
  absl::Status Offer(const OfferArgs& args);

  // Cancels a live request here and, when `notify_peer`, on the decode daemon. NOT_FOUND if not live.
  absl::Status Cancel(const std::string& request_id, const absl::Status& why, bool notify_peer);

 private:
  class OutboundRequest;

  // Joins and drops requests whose thread has ended.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DaemonContext* const context_;
  kvt::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<OutboundRequest>> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt::server

#endif  // KVT_SERVER_PREFILL_SIDE_H_
