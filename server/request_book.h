// The requests a daemon knows, on either side: live ones (at most max_requests, ids unique per side) and
// recently finished ones (kept for Watch replay, timelines and stats). Each has an event log that watchers
// read while it grows. Thread-safe.
#ifndef KVT_SERVER_REQUEST_BOOK_H_
#define KVT_SERVER_REQUEST_BOOK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "server/side.h"
#include "server/stage_profile.h"

namespace kvt::server {


enum class EventKind { kAnchorReady = 1, kFullReady = 2, kDone = 3, kFailed = 4 };

struct RequestEvent {
  EventKind kind = EventKind::kDone;
  uint32_t layer = 0;
  absl::Duration at;    // since the request was first seen by this daemon
  absl::Status status;  // kFailed: why
};

// A request's event log: per-layer events, then exactly one DONE or FAILED, after which nothing is added.
// The invariant watchers rely on: events are only appended, never changed.
class RequestEvents {
 public:
  explicit RequestEvents(absl::Time start) : start_(start) {}

  absl::Time start() const { return start_; }
  // Appends a per-layer event (ignored once finished).
  void Add(EventKind kind, uint32_t layer);
  // Appends DONE (status OK) or FAILED(status). Returns false (and adds nothing) if already finished.
  bool Finish(const absl::Status& status);
  bool finished() const;
  // The terminal status: OK for DONE, the failure otherwise; UNKNOWN while running.
  absl::Status outcome() const;

  // Events from index `from` on. Waits until there is at least one or `deadline` passes. `*finished` says
  // whether the log is complete (the returned events then end with DONE or FAILED).
  std::vector<RequestEvent> WaitFrom(size_t from, absl::Time deadline, bool* finished) const;
  std::vector<RequestEvent> Snapshot() const;

 private:
  const absl::Time start_;
  mutable kvt::Mutex mu_;
  std::vector<RequestEvent> events_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// What the book keeps per request, for Watch, Cancel and Stats. The side's own state lives with the side.
struct RequestRecord {
  RequestRecord(std::string id, Side side, absl::Time start)
      : request_id(std::move(id)), side(side), events(start), profile(start) {}

  const std::string request_id;
  const Side side;
  RequestEvents events;
  // Where the request's time went on this daemon, stage by stage; written by the side, read by the Profile RPC.
  StageProfile profile;

  // Progress for Stats; written by the side, read by anyone.
  std::atomic<uint32_t> num_layers{0};
  std::atomic<uint32_t> layers_anchor_ready{0};
  std::atomic<uint32_t> layers_full_ready{0};

  // Labels for Stats: the scheme (known on the decode side only once the transfer opens) and the peer.
  void SetLabels(std::string scheme, std::string peer) {
    kvt::MutexLock lock(&labels_mu_);
    if (!scheme.empty()) scheme_ = std::move(scheme);
    if (!peer.empty()) peer_ = std::move(peer);
  }
  std::pair<std::string, std::string> labels() const {
    kvt::MutexLock lock(&labels_mu_);
    return {scheme_, peer_};
  }
  // Cancels the request on this daemon (and tells the peer when `notify_peer`). Thread-safe, idempotent.
  std::function<void(const absl::Status& why, bool notify_peer)> cancel;

 private:
  mutable kvt::Mutex labels_mu_;
  std::string scheme_ ABSL_GUARDED_BY(labels_mu_);
  std::string peer_ ABSL_GUARDED_BY(labels_mu_);
};

class RequestBook {
 public:
  RequestBook(int max_live, int keep_finished, absl::Duration retention)
      : max_live_(max_live), keep_finished_(keep_finished), retention_(retention) {}

  // Publishes a new live request. ALREADY_EXISTS if `record`'s id is live on its side; RESOURCE_EXHAUSTED at
  // max_live (the message says the limit). A finished request of the same id is replaced.
  absl::Status Add(std::shared_ptr<RequestRecord> record);
  // Moves a live request to the finished list (call after its events finished).
  void Retire(const RequestRecord& record);

  // The live or retained request `id` on `side` (null if none).
  std::shared_ptr<RequestRecord> Find(Side side, const std::string& id) const;
  // The requests still running: live and not yet finished. A request whose DONE or FAILED is published is
  // left out even in the moment before its side retires it, so Stats never counts as in flight a request a
  // watcher has already seen end.
  std::vector<std::shared_ptr<RequestRecord>> Live() const;

 private:
  using Key = std::pair<int, std::string>;
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_live_;
  const int keep_finished_;
  const absl::Duration retention_;

  mutable kvt::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<RequestRecord>> live_ ABSL_GUARDED_BY(mu_);
  // Oldest first, with the time each was retired.
  std::deque<std::pair<absl::Time, std::shared_ptr<RequestRecord>>> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt::server

#endif  // KVT_SERVER_REQUEST_BOOK_H_
