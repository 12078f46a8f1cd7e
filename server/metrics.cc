#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace kvt::server {
namespace {

int SideIndex(Side side) { return side == Side::kPrefill ? 0 : 1; }

}  // namespace

namespace {

// `count` bucket bounds: first, first * 2, first * 4, ...
prometheus::Histogram::BucketBoundaries DoublingBuckets(double first, int count) {
  prometheus::Histogram::BucketBoundaries bounds;
  double bound = first;
  for (int i = 0; i < count; ++i, bound *= 2) bounds.push_back(bound);
  return bounds;
}

// Transfer latencies: 1 ms .. 65.536 s. Page codec times: 1 us .. 1.048576 s.
const prometheus::Histogram::BucketBoundaries& TransferBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries(DoublingBuckets(1e-3, 17));
  return *kBuckets;
}
const prometheus::Histogram::BucketBoundaries& PageBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries(DoublingBuckets(1e-6, 21));
  return *kBuckets;
}

absl::Status ValidateListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(listen).substr(colon + 1), &port) || port < 0 || port > 65535 ||
      listen.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address \"", listen, "\" is not \"host:port\" (port 0..65535), nor \"\" for none"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kDone:
      return "done";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

absl::string_view LaneName(Lane lane) {
  switch (lane) {
    case Lane::kAnchor:
      return "anchor";
    case Lane::kResidual:
      return "residual";
  }
  return "unknown";
}

// prometheus-cpp throws std::invalid_argument from Register/Add only for malformed metric or label names;
// every name here is a valid constant, so none of these calls can throw.
DaemonMetrics::DaemonMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& started = prometheus::BuildCounter()
                      .Name("kvt_transfers_started_total")
                      .Help("Transfers this daemon took on.")
                      .Register(*registry_);
  transfers_ = &prometheus::BuildCounter()
                    .Name("kvt_transfers_total")
                    .Help("Finished transfers by outcome; cause is the status code name of a failed one.")
                    .Register(*registry_);
  auto& bytes_sent = prometheus::BuildCounter()
                         .Name("kvt_bytes_sent_total")
                         .Help("Payload bytes sent, by lane.")
                         .Register(*registry_);
  auto& bytes_received = prometheus::BuildCounter()
                             .Name("kvt_bytes_received_total")
                             .Help("Payload bytes received, by lane.")
                             .Register(*registry_);
  auto& in_flight = prometheus::BuildGauge()
                        .Name("kvt_in_flight_transfers")
                        .Help("Transfers started and not yet finished.")
                        .Register(*registry_);
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("kvt_queue_depth")
                      .Help("Items waiting in each of the daemon's queues.")
                      .Register(*registry_);
  chunks_rejected_ = &prometheus::BuildCounter()
                          .Name("kvt_chunks_rejected_total")
                          .Help("Chunks the data plane rejected, by cause.")
                          .Register(*registry_);
  for (Side role : {Side::kPrefill, Side::kDecode}) {
    const prometheus::Labels labels = {{"role", std::string(SideName(role))}};
    started_[SideIndex(role)] = &started.Add(labels);
    in_flight_[SideIndex(role)] = &in_flight.Add(labels);
  }
  for (Lane lane : {Lane::kAnchor, Lane::kResidual}) {
    const prometheus::Labels labels = {{"lane", std::string(LaneName(lane))}};
    bytes_sent_[static_cast<int>(lane)] = &bytes_sent.Add(labels);
    bytes_received_[static_cast<int>(lane)] = &bytes_received.Add(labels);
  }
  auto histogram = [this](const char* name, const char* help, const auto& buckets) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_).Add({}, buckets);
  };
  anchor_latency_ =
      histogram("kvt_anchor_latency_seconds",
                "Time from a transfer's start until its whole anchor stream arrived.", TransferBuckets());
  full_latency_ = histogram("kvt_full_latency_seconds",
                            "Time from a transfer's start until all its streams arrived.", TransferBuckets());
  page_encode_ = histogram("kvt_page_encode_seconds", "Time to encode one KV page.", PageBuckets());
  page_decode_ = histogram("kvt_page_decode_seconds", "Time to decode one KV page.", PageBuckets());
  auto& stage_seconds = prometheus::BuildHistogram()
                            .Name("kvt_stage_seconds")
                            .Help("Each run of a pipeline stage (a layer's encode or send, a decode call, ...).")
                            .Register(*registry_);
  auto& stage_bytes = prometheus::BuildCounter()
                          .Name("kvt_stage_bytes_total")
                          .Help("Bytes the runs of each pipeline stage moved.")
                          .Register(*registry_);
  for (int i = 0; i < kStageCount; ++i) {
    const prometheus::Labels labels = {{"stage", std::string(StageName(static_cast<Stage>(i)))}};
    stage_seconds_[i] = &stage_seconds.Add(labels, PageBuckets());
    stage_bytes_[i] = &stage_bytes.Add(labels);
  }
}

DaemonMetrics::~DaemonMetrics() {
  if (exposer_ == nullptr) return;
  // civetweb's listener polls its socket with a 2 s timeout and looks at its stop flag only between polls, so
  // stopping it took up to 2 s of every daemon's exit. Knocking on the port (a connection that is closed at
  // once) ends the poll early; the knocks stop when the server is gone.
  std::atomic<bool> stopped{false};
  std::thread knock([this, &stopped] {
    while (!stopped.load()) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(port_));
        addr.sin_addr.s_addr = inet_addr(knock_host_.c_str());
        connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
        close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped.store(true);
  knock.join();
}

absl::StatusOr<std::unique_ptr<DaemonMetrics>> DaemonMetrics::Create(const MetricsOptions& options) {
  std::unique_ptr<DaemonMetrics> metrics(new DaemonMetrics());
  if (options.listen.empty()) return metrics;
  if (absl::Status status = ValidateListen(options.listen); !status.ok()) return status;

  // kvt uses no exceptions, but prometheus-cpp's Exposer throws (CivetException, a std::runtime_error) when
  // civetweb cannot start, which in practice means it cannot bind. Caught here, the lowest layer that sees
  // it, and turned into a Status; nothing else in this file throws.
  try {
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(options.listen, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", options.listen, " (", e.what(),
        "): the address is in use or not local to this host; choose another address, port 0 for any free "
        "port, or an empty address for no HTTP server"));
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("metrics server on ", options.listen, " started but reports no listening port"));
  }
  metrics->port_ = ports.front();
  // Where the destructor knocks: the listen host, or loopback for a wildcard (or a name, which it cannot resolve
  // without a lookup; the knock is only a speed-up, a miss costs the 2 s it saved).
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  in_addr parsed{};
  metrics->knock_host_ =
      (host.empty() || host == "0.0.0.0" || inet_pton(AF_INET, host.c_str(), &parsed) != 1) ? "127.0.0.1" : host;
  return metrics;
}

void DaemonMetrics::TransferStarted(Side role) {
  started_[SideIndex(role)]->Increment();
  totals_.started.fetch_add(1, std::memory_order_relaxed);
}

void DaemonMetrics::TransferFinished(Side role, Outcome outcome, absl::StatusCode code) {
  transfers_
      ->Add({{"role", std::string(SideName(role))},
             {"outcome", std::string(OutcomeName(outcome))},
             {"cause", outcome == Outcome::kFailed ? absl::StatusCodeToString(code) : std::string("none")}})
      .Increment();
  (outcome == Outcome::kDone     ? totals_.done
   : outcome == Outcome::kFailed ? totals_.failed
                                 : totals_.cancelled)
      .fetch_add(1, std::memory_order_relaxed);
}

void DaemonMetrics::BytesSent(Lane lane, uint64_t bytes) {
  bytes_sent_[static_cast<int>(lane)]->Increment(static_cast<double>(bytes));
  (lane == Lane::kAnchor ? totals_.anchor_bytes_sent : totals_.residual_bytes_sent)
      .fetch_add(bytes, std::memory_order_relaxed);
}

void DaemonMetrics::BytesReceived(Lane lane, uint64_t bytes) {
  bytes_received_[static_cast<int>(lane)]->Increment(static_cast<double>(bytes));
  totals_.bytes_received.fetch_add(bytes, std::memory_order_relaxed);
}

DaemonMetrics::Totals DaemonMetrics::totals() const {
  Totals t;
  t.started = totals_.started.load();
  t.done = totals_.done.load();
  t.failed = totals_.failed.load();
  t.cancelled = totals_.cancelled.load();
  t.anchor_bytes_sent = totals_.anchor_bytes_sent.load();
  t.residual_bytes_sent = totals_.residual_bytes_sent.load();
  t.bytes_received = totals_.bytes_received.load();
  return t;
}

void DaemonMetrics::AnchorLatency(absl::Duration d) { anchor_latency_->Observe(absl::ToDoubleSeconds(d)); }

void DaemonMetrics::FullLatency(absl::Duration d) { full_latency_->Observe(absl::ToDoubleSeconds(d)); }

void DaemonMetrics::EncodeLatency(absl::Duration per_page) {
  page_encode_->Observe(absl::ToDoubleSeconds(per_page));
}

void DaemonMetrics::DecodeLatency(absl::Duration per_page) {
  page_decode_->Observe(absl::ToDoubleSeconds(per_page));
}

void DaemonMetrics::StageRun(Stage stage, absl::Duration d, uint64_t bytes) {
  const int i = static_cast<int>(stage);
  if (i < 0 || i >= kStageCount) return;
  stage_seconds_[i]->Observe(absl::ToDoubleSeconds(d));
  if (bytes > 0) stage_bytes_[i]->Increment(static_cast<double>(bytes));
}

void DaemonMetrics::SetInFlight(Side role, int64_t transfers) {
  in_flight_[SideIndex(role)]->Set(static_cast<double>(transfers));
}

void DaemonMetrics::SetQueueDepth(absl::string_view queue, int64_t depth) {
  queue_depth_->Add({{"queue", std::string(queue)}}).Set(static_cast<double>(depth));
}

void DaemonMetrics::ChunksRejected(absl::string_view cause, uint64_t n) {
  chunks_rejected_->Add({{"cause", std::string(cause)}}).Increment(static_cast<double>(n));
}

std::string DaemonMetrics::RenderText() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kvt::server
