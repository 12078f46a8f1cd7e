// The Prometheus metrics of a kvt daemon (docs/DAEMON.md, "Where the time goes"): transfers by outcome, bytes per lane,
// latency histograms, in-flight and queue gauges, rejected chunks. Optionally served over HTTP at /metrics.
// Thread-safe: every method may be called from any thread. Nothing here logs.
//   KVT_ASSIGN_OR_RETURN(auto metrics, DaemonMetrics::Create(MetricsOptions{"0.0.0.0:9400"}));
//   metrics->TransferStarted(Side::kPrefill);
//   metrics->BytesSent(Lane::kAnchor, n);
#ifndef KVT_SERVER_METRICS_H_
#define KVT_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/side.h"
#include "server/stage_profile.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvt::server {

// How a transfer ended. Label "outcome": "done" / "failed" / "cancelled".
enum class Outcome { kDone, kFailed, kCancelled };
// Which stream the bytes belong to. Label "lane": "anchor" / "residual".
enum class Lane { kAnchor, kResidual };

absl::string_view OutcomeName(Outcome outcome);
absl::string_view LaneName(Lane lane);

struct MetricsOptions {
  // "host:port" to serve GET /metrics on ("127.0.0.1:0" = any free port on loopback); "" (default) = no HTTP
  // server, the metrics are then only readable through RenderText().
  std::string listen = "";
};

// Exported metrics (names carry their unit; counters end in _total):
//   kvt_transfers_started_total{role}
//   kvt_transfers_total{role, outcome, cause}  cause: status code name ("UNAVAILABLE") if failed, else "none"
//   kvt_bytes_sent_total{lane}, kvt_bytes_received_total{lane}
//   kvt_anchor_latency_seconds, kvt_full_latency_seconds  histograms, 1 ms doubling to 65.536 s
//   kvt_page_encode_seconds, kvt_page_decode_seconds      histograms, 1 us doubling to 1.048576 s
//   kvt_stage_seconds{stage}, kvt_stage_bytes_total{stage}   each run of a pipeline stage (stage_profile.h: a
//                                                          layer's encode or send, a decode call, ...), 1 us doubling
//   kvt_in_flight_transfers{role}, kvt_queue_depth{queue} gauges
//   kvt_chunks_rejected_total{cause}
class DaemonMetrics {
 public:
  // INVALID_ARGUMENT if `options.listen` is not "" and not "host:port" with a port in 0..65535; UNAVAILABLE
  // if the HTTP server cannot listen there (the message names the address and what to do).
  static absl::StatusOr<std::unique_ptr<DaemonMetrics>> Create(const MetricsOptions& options);

  // Stops the HTTP server (if any) before the metrics go away.
  ~DaemonMetrics();
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // The port the HTTP server listens on (the one picked for port 0); 0 when there is no HTTP server.
  int port() const { return port_; }

  // Counts a transfer this daemon took on. The in-flight gauge is separate: see SetInFlight.
  void TransferStarted(Side side);
  // Counts a finished transfer. `code` is the transfer's final status code; it becomes the "cause" label only
  // when `outcome` is kFailed (the others get cause="none").
  void TransferFinished(Side side, Outcome outcome, absl::StatusCode code);

  // Adds payload bytes put on / taken off the wire for one lane.
  void BytesSent(Lane lane, uint64_t bytes);
  void BytesReceived(Lane lane, uint64_t bytes);

  // Time from the transfer's start until its whole anchor stream (resp. anchor and residuals) arrived.
  void AnchorLatency(absl::Duration d);
  void FullLatency(absl::Duration d);
  // Time to encode (resp. decode) one page. Takes a short mutex inside prometheus-cpp: call once per page,
  // not per chunk.
  void EncodeLatency(absl::Duration per_page);
  void DecodeLatency(absl::Duration per_page);
  // One run of a pipeline stage that took `d` and moved `bytes` (stage_profile.h). Call per layer or decode call,
  // not per chunk.
  void StageRun(Stage stage, absl::Duration d, uint64_t bytes);

  // Gauges, set to the caller's current figure.
  void SetInFlight(Side side, int64_t transfers);
  void SetQueueDepth(absl::string_view queue, int64_t depth);

  // Adds `n` chunks the data plane rejected for `cause` (e.g. "crc", "unknown_transfer"). Callers holding
  // cumulative counters pass the increase since their last call.
  void ChunksRejected(absl::string_view cause, uint64_t n);

  // Every metric in the Prometheus text exposition format (what GET /metrics returns).
  std::string RenderText() const;

  // Plain totals since start, for the Stats RPC.
  struct Totals {
    uint64_t started = 0;
    uint64_t done = 0;
    uint64_t failed = 0;
    uint64_t cancelled = 0;
    uint64_t anchor_bytes_sent = 0;
    uint64_t residual_bytes_sent = 0;
    uint64_t bytes_received = 0;
  };
  Totals totals() const;

 private:
  DaemonMetrics();

  using CounterFamily = prometheus::Family<prometheus::Counter>;
  using GaugeFamily = prometheus::Family<prometheus::Gauge>;

  // Constant after construction. The families live in registry_; the pointers below are borrowed from them
  // (prometheus-cpp never moves a family or metric once added). Metrics with labels known in advance are
  // looked up once here; the others (cause, queue) through their family on each call.
  const std::shared_ptr<prometheus::Registry> registry_;
  CounterFamily* transfers_;
  GaugeFamily* queue_depth_;
  CounterFamily* chunks_rejected_;
  std::array<prometheus::Counter*, 2> started_;         // by Side
  std::array<prometheus::Counter*, 2> bytes_sent_;      // by Lane
  std::array<prometheus::Counter*, 2> bytes_received_;  // by Lane
  std::array<prometheus::Gauge*, 2> in_flight_;         // by Side
  prometheus::Histogram* anchor_latency_;
  prometheus::Histogram* full_latency_;
  prometheus::Histogram* page_encode_;
  prometheus::Histogram* page_decode_;
  std::array<prometheus::Histogram*, kStageCount> stage_seconds_{};
  std::array<prometheus::Counter*, kStageCount> stage_bytes_{};

  struct AtomicTotals {
    std::atomic<uint64_t> started{0}, done{0}, failed{0}, cancelled{0};
    std::atomic<uint64_t> anchor_bytes_sent{0}, residual_bytes_sent{0}, bytes_received{0};
  };
  AtomicTotals totals_;

  // Set once by Create, after construction; declared last so that it stops serving before the rest dies.
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  std::string knock_host_;  // an IPv4 address the destructor connects to, to end the listener's poll
};

}  // namespace kvt::server

#endif  // KVT_SERVER_METRICS_H_
