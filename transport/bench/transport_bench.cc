#include "transport/bench/transport_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "transport/bench/perftest_runner.h"
#include "transport/options.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

namespace kvt::transport {
namespace {

constexpr double kBytesPerGbit = 1e9 / 8;
constexpr uint64_t kSourceBufferBytes = uint64_t{256} << 20;
constexpr uint64_t kWarmupBytes = uint64_t{64} << 20;
constexpr absl::Duration kReceiveTimeout = absl::Seconds(60);
constexpr size_t kBusiestThreads = 4;

struct LinkPair {
  std::unique_ptr<Transport> receiver;
  std::unique_ptr<Transport> sender;
  PeerId peer = 0;
};

absl::StatusOr<LinkPair> MakeLinkPair(const TransportBenchOptions& bench, const std::string& tls, int workers,
                                      double rate) {
  Options o;
  o.ucx_tls = tls;
  o.ucx_workers = workers;
  if (tls.find("tcp") != std::string::npos) o.ucx_net_devices = bench.net_devices;
  o.chunk_bytes = bench.chunk_bytes;
  o.rate_bytes_per_second = rate;
  o.max_inflight_bytes = std::max<int64_t>(int64_t{64} << 20, 16 * (int64_t{bench.chunk_bytes} + 64));
  o.max_receive_buffer_bytes = o.max_inflight_bytes;
  o.stall_timeout = absl::Seconds(30);
  LinkPair p;
  KVT_ASSIGN_OR_RETURN(p.receiver, NewUcxTransport(o));
  KVT_ASSIGN_OR_RETURN(p.sender, NewUcxTransport(o));
  KVT_ASSIGN_OR_RETURN(p.peer, p.sender->Connect(p.receiver->address(), absl::Seconds(30)));
  return p;
}

// Splits `total` bytes into streams (pages 0, 1, ...) that all point into `source`.
std::vector<OutboundStream> Streams(absl::Span<const uint8_t> source, uint64_t total, uint8_t stage) {
  std::vector<OutboundStream> streams;
  uint32_t page = 0;
  while (total > 0) {
    const uint64_t n = std::min<uint64_t>(total, source.size());
    streams.push_back({page++, stage, source.subspan(0, n)});
    total -= n;
  }
  return streams;
}

std::vector<StreamBounds> Bounds(const std::vector<OutboundStream>& streams) {
  std::vector<StreamBounds> b;
  for (const OutboundStream& s : streams) b.push_back({s.page, s.stage, s.bytes.size()});
  return b;
}

// Receives (and drops) every chunk of `id`; sets *done_at when the last one arrives.
class Drainer {
 public:
  Drainer(Transport* rx, uint64_t id)
      : thread_([this, rx, id] {
          while (true) {
            auto c = rx->Receive(id, kReceiveTimeout);
            if (!c.ok()) {
              status_ = c.status();
              return;
            }
            if (c->transfer_complete()) {
              done_at_ = absl::Now();
              return;
            }
          }
        }) {}
  // Joins; returns when the last chunk arrived.
  absl::StatusOr<absl::Time> Join() {
    thread_.join();
    if (!status_.ok()) return status_;
    return done_at_;
  }

 private:
  absl::Status status_;
  absl::Time done_at_;
  std::thread thread_;  // last: starts after the fields it writes exist
};

// Sends `total` bytes as one transfer; returns seconds from Send to the last byte at the receiver. With `loads`,
// also the busiest threads of the process meanwhile.
absl::StatusOr<double> TimedTransfer(LinkPair& p, uint64_t id, absl::Span<const uint8_t> source, uint64_t total,
                                     std::vector<ThreadLoad>* loads = nullptr) {
  std::vector<OutboundStream> streams = Streams(source, total, 0);
  KVT_RETURN_IF_ERROR(p.receiver->Expect(id, Bounds(streams)));
  Drainer drain(p.receiver.get(), id);
  const absl::flat_hash_map<int, ThreadCpu> cpu_before =
      loads != nullptr ? SampleThreadCpu() : absl::flat_hash_map<int, ThreadCpu>();
  const absl::Time start = absl::Now();
  auto handle = p.sender->Send(p.peer, id, std::move(streams));
  if (!handle.ok()) {
    p.receiver->Cancel(id);
    drain.Join().IgnoreError();
    return handle.status();
  }
  KVT_ASSIGN_OR_RETURN(absl::Time done, drain.Join());
  KVT_RETURN_IF_ERROR((*handle)->Wait());
  const double seconds = absl::ToDoubleSeconds(done - start);
  if (loads != nullptr) *loads = BusiestThreads(cpu_before, SampleThreadCpu(), seconds, kBusiestThreads);
  return seconds;
}

std::vector<uint8_t> SourceBuffer() {
  std::vector<uint8_t> buf(kSourceBufferBytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&buf[i], &x, 8);
  }
  return buf;
}

// A residual transfer queued, then an anchor transfer right after it, at `gbps`.
absl::StatusOr<TransportBenchReport::AnchorFirst> AnchorFirstRun(const TransportBenchOptions& options,
                                                                 const std::string& tls, int workers, double gbps,
                                                                 absl::Span<const uint8_t> src, uint64_t& next_id) {
  const double rate = gbps * kBytesPerGbit;
  KVT_ASSIGN_OR_RETURN(LinkPair p, MakeLinkPair(options, tls, workers, rate));
  KVT_RETURN_IF_ERROR(TimedTransfer(p, next_id++, src, 4 * uint64_t{options.chunk_bytes}).status());
  const uint64_t residual_id = next_id++, anchor_id = next_id++;
  std::vector<OutboundStream> residual = Streams(src, options.residual_bytes, 1);
  std::vector<OutboundStream> anchor = Streams(src, options.anchor_bytes, 0);
  KVT_RETURN_IF_ERROR(p.receiver->Expect(residual_id, Bounds(residual)));
  KVT_RETURN_IF_ERROR(p.receiver->Expect(anchor_id, Bounds(anchor)));
  Drainer drain_residual(p.receiver.get(), residual_id);
  Drainer drain_anchor(p.receiver.get(), anchor_id);
  const absl::Time residual_start = absl::Now();
  auto residual_handle = p.sender->Send(p.peer, residual_id, std::move(residual));
  const absl::Time anchor_start = absl::Now();
  auto anchor_handle = p.sender->Send(p.peer, anchor_id, std::move(anchor));
  if (!residual_handle.ok() || !anchor_handle.ok()) {
    p.receiver->Cancel(residual_id);
    p.receiver->Cancel(anchor_id);
    drain_residual.Join().IgnoreError();
    drain_anchor.Join().IgnoreError();
    return !residual_handle.ok() ? residual_handle.status() : anchor_handle.status();
  }
  KVT_ASSIGN_OR_RETURN(absl::Time anchor_done, drain_anchor.Join());
  KVT_ASSIGN_OR_RETURN(absl::Time residual_done, drain_residual.Join());
  KVT_RETURN_IF_ERROR((*anchor_handle)->Wait());
  KVT_RETURN_IF_ERROR((*residual_handle)->Wait());
  TransportBenchReport::AnchorFirst a;
  a.transport = tls;
  a.workers = workers;
  a.rate_gbps = gbps;
  a.anchor_bytes = options.anchor_bytes;
  a.residual_bytes = options.residual_bytes;
  a.anchor_seconds = absl::ToDoubleSeconds(anchor_done - anchor_start);
  a.residual_seconds = absl::ToDoubleSeconds(residual_done - residual_start);
  a.bound_seconds = (options.anchor_bytes / rate + options.chunk_bytes / rate) * 1.05;
  a.within_bound = a.anchor_seconds <= a.bound_seconds;
  return a;
}

std::string Machine() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrFormat("%s, %d CPUs", host, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

absl::StatusOr<TransportBenchReport> RunTransportBench(const TransportBenchOptions& options) {
  if (options.transports.empty()) return absl::InvalidArgumentError("no transports to measure");
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError("chunk_bytes must be positive");
  if (options.ucx_workers.empty()) return absl::InvalidArgumentError("no UCX worker counts to measure");
  TransportBenchReport report;
  report.machine = Machine();
  const std::vector<uint8_t> source = SourceBuffer();
  const absl::Span<const uint8_t> src(source);
  uint64_t next_id = 1;

  for (const std::string& tls : options.transports) {
    // ucx_perftest with the same transport and message size, run once per transport after the first kvt runs.
    std::optional<PerftestRun> perftest_run;
    absl::StatusOr<double> perftest = absl::UnknownError("not run");
    for (const int workers : options.ucx_workers) {
      // 1. Unthrottled from both sources.
      double streaming_gbps = 0;
      const size_t first = report.unthrottled.size();
      {
        KVT_ASSIGN_OR_RETURN(LinkPair p, MakeLinkPair(options, tls, workers, 0));
        KVT_RETURN_IF_ERROR(TimedTransfer(p, next_id++, src, kWarmupBytes).status());
        std::vector<absl::Span<const uint8_t>> sources = {src};
        if (options.one_chunk_source) sources.push_back(src.subspan(0, options.chunk_bytes));
        for (const absl::Span<const uint8_t> source : sources) {
          TransportBenchReport::Unthrottled u;
          KVT_ASSIGN_OR_RETURN(double seconds,
                               TimedTransfer(p, next_id++, source, options.unthrottled_bytes, &u.busiest_threads));
          u.transport = tls;
          u.workers = workers;
          u.message_bytes = options.chunk_bytes;
          u.source_bytes = source.size();
          u.bytes = options.unthrottled_bytes;
          u.seconds = seconds;
          u.goodput_gbps = options.unthrottled_bytes / seconds / kBytesPerGbit;
          if (source.size() == src.size()) streaming_gbps = u.goodput_gbps;
          report.unthrottled.push_back(u);
        }
      }  // the pair is gone: its cores are free before perftest runs
      if (options.run_perftest) {
        if (!perftest_run.has_value()) {
          PerftestRun run;
          run.program = options.perftest_program;
          run.test = options.perftest_test;
          run.tls = tls;
          run.net_devices = options.net_devices;
          run.message_bytes = options.chunk_bytes;
          run.iterations = options.perftest_iterations;
          run.error_handling = true;
          perftest = RunUcxPerftest(run);
          if (!perftest.ok() && perftest.status().code() == absl::StatusCode::kInternal) {
            run.error_handling = false;  // UCX has no peer error handling here; nor has kvt's link then
            perftest = RunUcxPerftest(run);
          }
          perftest_run = run;
        }
        for (size_t i = first; i < report.unthrottled.size(); ++i) {
          TransportBenchReport::Unthrottled& u = report.unthrottled[i];
          u.perftest_test = perftest_run->test;
          u.perftest_error_handling = perftest_run->error_handling;
          if (perftest.ok()) {
            u.perftest_ran = true;
            u.perftest_gbps = *perftest / kBytesPerGbit;
            u.ratio = u.goodput_gbps / u.perftest_gbps;
          } else {
            u.perftest_note = perftest.status().ToString();
          }
        }
      }
      // 2. Throttled at each rate.
      for (double gbps : options.rates_gbps) {
        const double rate = gbps * kBytesPerGbit;
        KVT_ASSIGN_OR_RETURN(LinkPair p, MakeLinkPair(options, tls, workers, rate));
        KVT_RETURN_IF_ERROR(TimedTransfer(p, next_id++, src, 4 * uint64_t{options.chunk_bytes}).status());
        const uint64_t chunks = std::max<uint64_t>(8, static_cast<uint64_t>(rate * options.throttled_seconds) /
                                                          options.chunk_bytes);
        const uint64_t bytes = chunks * options.chunk_bytes;
        KVT_ASSIGN_OR_RETURN(double seconds, TimedTransfer(p, next_id++, src, bytes));
        TransportBenchReport::Throttled t;
        t.transport = tls;
        t.workers = workers;
        t.rate_gbps = gbps;
        t.bytes = bytes;
        t.seconds = seconds;
        t.goodput_gbps = bytes / seconds / kBytesPerGbit;
        t.ratio = t.goodput_gbps / gbps;
        t.above_unthrottled = gbps > streaming_gbps;
        report.throttled.push_back(t);
      }
      // 3. Anchor first at each rate: a residual transfer is queued, then an anchor transfer right after it.
      for (double gbps : options.rates_gbps) {
        KVT_ASSIGN_OR_RETURN(TransportBenchReport::AnchorFirst a,
                             AnchorFirstRun(options, tls, workers, gbps, src, next_id));
        report.anchor_first.push_back(a);
      }
    }
  }
  return report;
}

std::string FormatTransportBenchTable(const TransportBenchReport& r) {
  std::string out = absl::StrFormat("kvt transport benchmark on %s (UCX, 127.0.0.1)\n\n", r.machine);
  absl::StrAppend(&out,
                  "Unthrottled goodput against ucx_perftest (same UCX_TLS and message size; target ratio >= 0.90).\n"
                  "source: the distinct bytes kvt sends from; ucx_perftest resends one message buffer.\n");
  absl::StrAppendFormat(&out, "%-10s %7s %10s %10s %10s %9s %12s %16s %7s  %s\n", "transport", "workers", "message",
                        "source", "bytes", "seconds", "kvt Gbit/s", "perftest Gbit/s", "ratio", "perftest");
  for (const auto& u : r.unthrottled) {
    absl::StrAppendFormat(&out, "%-10s %7d %8dKi %8.0fMi %8.0fMi %9.3f %12.2f ", u.transport, u.workers,
                          u.message_bytes >> 10,
                          u.source_bytes / 1048576.0, u.bytes / 1048576.0, u.seconds, u.goodput_gbps);
    if (u.perftest_ran) {
      absl::StrAppendFormat(&out, "%16.2f %7.3f  -t %s%s\n", u.perftest_gbps, u.ratio, u.perftest_test,
                            u.perftest_error_handling ? " -e" : "");
    } else {
      absl::StrAppendFormat(&out, "%16s %7s  (%s)\n", "-", "-", u.perftest_note);
    }
  }
  absl::StrAppend(&out,
                  "\nBusiest threads of each unthrottled run (CPU-seconds per second; near 1.00 = saturated)\n");
  absl::StrAppendFormat(&out, "%-10s %7s %10s  %s\n", "transport", "workers", "source", "threads");
  for (const auto& u : r.unthrottled) {
    absl::StrAppendFormat(&out, "%-10s %7d %8.0fMi  %s\n", u.transport, u.workers, u.source_bytes / 1048576.0,
                          FormatThreadLoads(u.busiest_threads));
  }
  absl::StrAppend(&out, "\nThrottled goodput (token bucket at R; target ratio >= 0.95)\n");
  absl::StrAppendFormat(&out, "%-10s %7s %10s %10s %9s %15s %7s\n", "transport", "workers", "R Gbit/s", "bytes",
                        "seconds", "goodput Gbit/s", "ratio");
  for (const auto& t : r.throttled) {
    absl::StrAppendFormat(&out, "%-10s %7d %10.2f %8.0fMi %9.3f %15.3f %7.3f%s\n", t.transport, t.workers, t.rate_gbps,
                          t.bytes / 1048576.0, t.seconds, t.goodput_gbps, t.ratio,
                          t.above_unthrottled ? "  (R above this transport's unthrottled goodput)" : "");
  }
  absl::StrAppend(&out,
                  "\nAnchor first (residual queued, anchor queued right after; target: anchor <= "
                  "(anchor/R + one chunk/R) x 1.05)\n");
  absl::StrAppendFormat(&out, "%-10s %7s %10s %10s %12s %10s %9s %7s %11s\n", "transport", "workers", "R Gbit/s",
                        "anchor", "residual", "anchor s", "bound s", "within", "residual s");
  for (const auto& a : r.anchor_first) {
    absl::StrAppendFormat(&out, "%-10s %7d %10.2f %8.0fMi %10.0fMi %10.4f %9.4f %7s %11.4f\n", a.transport, a.workers,
                          a.rate_gbps,
                          a.anchor_bytes / 1048576.0, a.residual_bytes / 1048576.0, a.anchor_seconds,
                          a.bound_seconds, a.within_bound ? "yes" : "NO", a.residual_seconds);
  }
  return out;
}

std::string FormatTransportBenchJson(const TransportBenchReport& r) {
  nlohmann::json j;
  j["machine"] = r.machine;
  j["unthrottled"] = nlohmann::json::array();
  for (const auto& u : r.unthrottled) {
    nlohmann::json e = {{"transport", u.transport},   {"workers", u.workers},
                        {"message_bytes", u.message_bytes},
                        {"source_bytes", u.source_bytes}, {"bytes", u.bytes},
                        {"seconds", u.seconds},       {"goodput_gbps", u.goodput_gbps},
                        {"perftest_ran", u.perftest_ran}, {"perftest_test", u.perftest_test},
                        {"perftest_error_handling", u.perftest_error_handling}};
    e["busiest_threads"] = nlohmann::json::array();
    for (const ThreadLoad& l : u.busiest_threads) {
      e["busiest_threads"].push_back({{"name", l.name}, {"utilization", l.utilization}});
    }
    if (u.perftest_ran) {
      e["perftest_gbps"] = u.perftest_gbps;
      e["ratio"] = u.ratio;
    } else {
      e["perftest_note"] = u.perftest_note;
    }
    j["unthrottled"].push_back(e);
  }
  j["throttled"] = nlohmann::json::array();
  for (const auto& t : r.throttled) {
    j["throttled"].push_back({{"transport", t.transport},
                              {"workers", t.workers},
                              {"rate_gbps", t.rate_gbps},
                              {"bytes", t.bytes},
                              {"seconds", t.seconds},
                              {"goodput_gbps", t.goodput_gbps},
                              {"ratio", t.ratio},
                              {"above_unthrottled", t.above_unthrottled}});
  }
  j["anchor_first"] = nlohmann::json::array();
  for (const auto& a : r.anchor_first) {
    j["anchor_first"].push_back({{"transport", a.transport},
                                 {"workers", a.workers},
                                 {"rate_gbps", a.rate_gbps},
                                 {"anchor_bytes", a.anchor_bytes},
                                 {"residual_bytes", a.residual_bytes},
                                 {"anchor_seconds", a.anchor_seconds},
                                 {"bound_seconds", a.bound_seconds},
                                 {"within_bound", a.within_bound},
                                 {"residual_seconds", a.residual_seconds}});
  }
  return j.dump(2) + "\n";
}

}  // namespace kvt::transport
