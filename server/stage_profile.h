// Where one request's time goes on one daemon, stage by stage (docs/DAEMON.md, "Where the time goes"): for each
// stage, how many times it ran, how long it was busy in all (summed over threads, so it can exceed the wall
// time), when it first started and last ended (since the request started on this daemon) and the bytes it
// moved. The prefill side records encode, staging waits and sends per layer; the decode side records the
// rendezvous, every chunk's arrival per lane, and each decode call with its time in the queue. `kvtctl profile`
// and `kvtctl demo` print it; the Profile RPC returns it. Thread-safe; Add is a short critical section, cheap
// enough for every chunk.
#ifndef KVT_SERVER_STAGE_PROFILE_H_
#define KVT_SERVER_STAGE_PROFILE_H_

#include <array>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace kvt::server {

enum class Stage : int {
  // Prefill side.
  kEncode = 0,   // a layer read from the engine's blocks and encoded (GPU: kernels, copy to pinned host, seal)
  kStagingWait,  // the request's thread waiting for room in its staging bytes (the oldest layer's acknowledgement)
  kSend,         // a layer from Send to the receiver's acknowledgement: lanes, pacing, wire, checks there
  // Decode side.
  kRendezvous,      // Expect until the prefill daemon opened the transfer
  kArriveAnchor,    // anchor-lane chunks landing (spans: the first to the last; busy: none)
  kArriveResidual,  // residual-lane chunks landing
  kDecodeQueue,     // a page decodable (its streams landed) until its decode started: workers or GPU busy
  kDecodeAnchor,    // decoding pages from their anchor alone into the engine's blocks
  kDecodeFull,      // decoding pages at full precision into the engine's blocks
  kCount,
};
inline constexpr int kStageCount = static_cast<int>(Stage::kCount);

// "encode", "staging_wait", "send", "rendezvous", "arrive_anchor", "arrive_residual", "decode_queue",
// "decode_anchor", "decode_full".
absl::string_view StageName(Stage stage);

struct StageTotals {
  uint64_t count = 0;
  absl::Duration busy;         // the durations added, summed
  absl::Duration first_start;  // since the request's start; meaningful when count > 0
  absl::Duration last_end;
  uint64_t bytes = 0;
};

class StageProfile {
 public:
  explicit StageProfile(absl::Time start) : start_(start) {}

  // Records one run of `stage` over [begin, end] that moved `bytes`. An instant (begin == end) marks an arrival.
  void Add(Stage stage, absl::Time begin, absl::Time end, uint64_t bytes = 0);

  std::array<StageTotals, kStageCount> Snapshot() const;

 private:
  const absl::Time start_;
  mutable kvt::Mutex mu_;
  std::array<StageTotals, kStageCount> totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt::server

#endif  // KVT_SERVER_STAGE_PROFILE_H_
