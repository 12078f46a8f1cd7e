// One request on the decode side (docs/DAEMON.md, "One request, end to end"): its rendezvous with the prefill
// daemon's OpenTransfer (Accept checks the source's plan against ours), one layer inbox per layer that the data
// plane writes the pages' streams into, and the decodes that move what has landed into the engine's blocks
// through the region's codec: anchor decodes before full ones (high priority on the worker pool), pages one at a
// time on the host codec, batches of a layer's pages on the GPU. Per layer its events say ANCHOR_READY, then
// FULL_READY; then DONE, or FAILED with the status.
//
// Invariant: a page's values in the engine's blocks only ever move to more stages (a decode of fewer stages never
// overwrites one of more), a stream is read only once it has landed whole, and nothing is written into the
// engine's blocks after DONE or FAILED is published: a request that ends while decodes run publishes its end
// when the last of them returns (and releases its region then). Thread-safe.
#ifndef KVT_SERVER_INBOUND_REQUEST_H_
#define KVT_SERVER_INBOUND_REQUEST_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "codec/scheme.h"
#include "common/mutex.h"
#include "kv/kv_layout.h"
#include "kv/transfer_plan.h"
#include "server/daemon_context.h"
#include "server/layer_inbox.h"
#include "server/region_codec.h"
#include "transport/transport.h"

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
  kv::KvLayoutSpec source_layout;
  uint64_t num_tokens = 0;
  uint32_t page_tokens = 0;
  int chunk_tokens = 0;
  std::vector<kv::PlannedPage> pages;  // as the source sent them, checked against our own plan
  std::string source_daemon_id;
  std::string source_address;
};

class InboundRequest : public std::enable_shared_from_this<InboundRequest> {
 public:
  InboundRequest(DaemonContext* context, ExpectArgs args, RegionLease region, std::shared_ptr<RequestRecord> record);

  const std::string& id() const { return args_.request_id; }
  absl::Time deadline() const { return deadline_; }
  uint64_t first_transfer_id() const { return first_transfer_id_; }
  size_t num_layers() const { return layers_.size(); }

  // Checks the source's announcement against this request and builds the page states. Called once, under the
  // decode side's lock (so that two opens cannot race); allocates nothing large.
  absl::Status Accept(const OpenArgs& open, uint64_t first_transfer_id);

  // Makes each layer's inbox (pooled memory, which may have to be allocated and pinned: call it outside the decode
  // side's lock), then announces every layer's transfer to the data plane with its streams landing in the inbox.
  // One link group for the request: a prefill daemon that dies fails every layer, started or not. The request's
  // status if it ended meanwhile.
  absl::Status ExpectLayers(uint64_t link_group);

  // A verified chunk of layer `layer` (the data plane checked it lies inside its stream and wrote it into the
  // inbox).
  void OnChunk(uint32_t layer, const transport::ReceivedChunk& chunk);

  // Fails the request (first failure wins): cancels its data-plane transfers, tells the peer if asked.
  void Fail(const absl::Status& status, bool notify_peer);
  // At the deadline: DONE at anchor precision when allowed and every layer's anchor is in place, else
  // DEADLINE_EXCEEDED.
  void Expire();

  bool finished() const;
  // Whether the prefill daemon this request comes from stopped answering its control plane.
  bool SourceDead() const;
  std::string source_address() const;

  // Called once when the request finishes (set before it is published).
  std::function<void(const InboundRequest&)> on_finished;

 private:
  struct PageState {
    const kv::PlannedPage* plan = nullptr;  // into planned_
    uint32_t streams_complete = 0;      // bit s: stream s landed whole
    int stages_available = 0;           // leading complete streams
    int stages_decoded = 0;             // what the engine's blocks hold
    bool decode_scheduled = false;      // a decode of this page is queued or running
    absl::Time decodable_since;         // when stages_available last grew
  };
  struct LayerState {
    std::vector<PageState> pages;
    std::shared_ptr<LayerInbox> inbox;  // dropped once every page is at full precision, or the request ended
    size_t pages_anchor = 0;
    size_t pages_full = 0;
    // Batch codecs, per kind (K 0, V 1): drain tasks queued or running for this layer, and whether one queued
    // and not yet started has high priority (a page's first decode that lands behind a queued low-priority drain
    // gets a high one of its own).
    std::array<int, 2> drains{};
    std::array<bool, 2> high_drain_queued{};
  };

  // Host codecs: decodes one page, again while more of it landed meanwhile.
  void DecodePageTask(uint32_t layer, uint32_t page_index);
  // Batch codecs: decodes a batch of layer `layer`'s landed pages of `kind` (pages still without their anchor
  // first), then queues itself again while more is left, with the priority of what is left. `priority`: the one
  // it was queued with.
  void DrainTask(uint32_t layer, uint32_t kind, TaskPriority priority);
  // The pool a drain or page task runs on: the device's workers for codecs that hold a GPU slot, so that codec
  // threads never wait for one.
  WorkerPool* DecodeWorkers() const;
  // Records that page `page_index` of `layer` now holds `stages` decoded stages: the layer's events, the inbox let
  // go once the layer is at full precision. Returns whether that completed the request.
  bool PageDecodedLocked(uint32_t layer, uint32_t page_index, int stages) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A decode task ended. Returns whether the request's end is now to be published (it finished and this was the
  // last task): the caller then calls PublishEnd, after unlocking.
  bool TaskEndedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) ABSL_MUST_USE_RESULT;
  // DONE or FAILED in the request's events, and the decode side told; once, when no decode runs any more.
  void PublishEnd();
  // Tells the peer why (if `peer` is set), then cancels the layers' data-plane transfers, on the worker pool.
  void StopTransfers(std::string peer, absl::Status why, size_t layers);
  void Finish(const absl::Status& status);

  DaemonContext* const context_;
  const ExpectArgs args_;
  const std::shared_ptr<RequestRecord> record_;
  const absl::Time deadline_;

  mutable kvt::Mutex mu_;
  RegionLease region_;  // released once finished and no decode runs
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool opened_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool published_ ABSL_GUARDED_BY(mu_) = false;  // the end is (being) published
  int active_tasks_ ABSL_GUARDED_BY(mu_) = 0;
  bool watching_source_ ABSL_GUARDED_BY(mu_) = false;
  // Set once by Accept (under mu_), read-only afterwards.
  codec::Scheme scheme_;
  std::unique_ptr<RegionCodec> codec_;
  size_t max_batch_ = 1;
  std::vector<std::vector<kv::PlannedPage>> planned_;  // per layer: the pages' plans, for their states and the inboxes
  std::string source_address_;
  uint64_t first_transfer_id_ = 0;
  absl::Time opened_at_;
  std::vector<LayerState> layers_;  // the vector is sized by Accept; entries guarded by mu_
};

}  // namespace kvt::server

#endif  // KVT_SERVER_INBOUND_REQUEST_H_
