#include "tools/kvtctl/cluster_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "codec/eval/synthetic_kv.h"
#include "codec/options.h"
#include "codec/scheme.h"
#include "common/status_macros.h"
#include "kv/transfer_plan.h"
#include "transport/chunk_header.h"
#include "transport/clock.h"
#include "transport/lane_scheduler.h"
#include "transport/token_bucket.h"

namespace kvt::kvtctl {
namespace {

using transport::LaneScheduler;
using transport::StreamKey;
using transport::TokenBucket;

// Virtual time: moves only when the simulation advances it (single-threaded, so no lock).
class VirtualClock final : public transport::Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::UnixEpoch();
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q / 100.0 * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// One (prefill, decode) link: the data plane's scheduler and pacing, and when its wire is next free.
struct Link {
  Link(const SimConfig& c, const transport::Clock* clock)
      : scheduler(c.chunk_bytes, c.starvation_bound),
        bucket(c.rate_gbps * 1e9 / 8, static_cast<int64_t>(c.chunk_bytes + transport::kChunkHeaderBytes), clock) {}
  LaneScheduler scheduler;
  TokenBucket bucket;
  absl::Time wire_free;
};

}  // namespace

absl::StatusOr<SimRun> ParseSimRun(const std::string& name) {
  if (name == "lynx-no-priority") return SimRun{name, "lynx", LanePolicy::kOneLane};
  KVT_ASSIGN_OR_RETURN(const codec::Scheme scheme, codec::ParseScheme(name));
  if (scheme.num_streams() > 1) return SimRun{name, name, LanePolicy::kAnchorFirst};
  return SimRun{name, name, LanePolicy::kOneLane};
}

absl::StatusOr<std::vector<SimArrival>> MakeArrivals(const SimConfig& c) {
  if (c.prefill_daemons < 1 || c.decode_daemons < 1 || c.prefill_daemons > 64 || c.decode_daemons > 64) {
    return absl::InvalidArgumentError("--prefill and --decode must be 1..64");
  }
  if (!(c.arrivals_per_s > 0) || !(c.duration_s > 0) || c.arrivals_per_s * c.duration_s > 1e6) {
    return absl::InvalidArgumentError("--arrivals-per-s and --duration-s must be positive, at most 1e6 requests");
  }
  if (c.context_tokens.empty()) return absl::InvalidArgumentError("--context needs at least one length");
  for (int t : c.context_tokens) {
    if (t < 1 || t > (1 << 20)) return absl::InvalidArgumentError(absl::StrCat("context length ", t, " not in 1..2^20"));
  }
  std::mt19937_64 rng(c.seed);
  std::exponential_distribution<double> gap(c.arrivals_per_s);
  std::vector<SimArrival> out;
  for (double t = gap(rng); t < c.duration_s; t += gap(rng)) {
    SimArrival a;
    a.at_s = t;
    a.tokens = c.context_tokens[rng() % c.context_tokens.size()];
    a.prefill = static_cast<int>(rng() % c.prefill_daemons);
    a.decode = static_cast<int>(rng() % c.decode_daemons);
    out.push_back(a);
  }
  return out;
}

absl::StatusOr<SimResult> Simulate(const SimConfig& c, const SimRun& run, const std::vector<SimArrival>& arrivals) {
  if (!(c.rate_gbps > 0) || c.rate_gbps > 10000) return absl::InvalidArgumentError("--rate-gbps must be in (0, 10000]");
  if (!(c.prefill_tokens_per_s > 0)) return absl::InvalidArgumentError("--prefill-tokens-per-s must be positive");
  if (c.chunk_bytes == 0 || c.starvation_bound <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("chunk bytes and the starvation bound must be positive");
  }
  for (const SimArrival& a : arrivals) {
    if (a.prefill < 0 || a.prefill >= c.prefill_daemons || a.decode < 0 || a.decode >= c.decode_daemons ||
        a.tokens < 1 || !(a.at_s >= 0)) {
      return absl::InvalidArgumentError("an arrival names a daemon the config does not have, or no tokens");
    }
  }
  KVT_ASSIGN_OR_RETURN(const codec::eval::ModelShape model, codec::eval::ModelPreset(c.model));
  KVT_ASSIGN_OR_RETURN(const codec::Scheme scheme, codec::ParseScheme(run.scheme));
  const int layers = model.layers;
  const int streams = scheme.num_streams();

  // One layer's pages and their streams' bytes, from kvtd's own page plan (pages sized by the daemon's rule);
  // kvtd queues one data-plane stream per page and stage, and so does the simulation.
  std::map<int, std::vector<std::vector<uint64_t>>> layer_pages;
  for (const SimArrival& a : arrivals) {
    if (layer_pages.count(a.tokens)) continue;
    KVT_ASSIGN_OR_RETURN(const kv::TransferPlan plan,
                         kv::MakeTransferPlan(scheme, codec::CodecOptions{}.chunk_tokens, 1, a.tokens, 0,
                                                  model.channels()));
    std::vector<std::vector<uint64_t>> pages;
    for (const kv::PlannedPage& page : plan.layers[0]) pages.push_back(page.stream_bytes);
    layer_pages[a.tokens] = std::move(pages);
  }

  VirtualClock clock;
  const absl::Time t0 = clock.Now();
  auto seconds = [&](absl::Time t) { return absl::ToDoubleSeconds(t - t0); };
  std::vector<std::unique_ptr<Link>> links;
  for (int i = 0; i < c.prefill_daemons * c.decode_daemons; ++i) {
    links.push_back(std::make_unique<Link>(c, &clock));
    links.back()->wire_free = t0;
  }

  // Layer-ready events: (time, request, layer), earliest first; prefill is one request at a time per daemon.
  using Ready = std::tuple<absl::Time, size_t, int>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> ready;
  std::vector<absl::Time> prefill_free(c.prefill_daemons, t0);
  for (size_t r = 0; r < arrivals.size(); ++r) {
    const SimArrival& a = arrivals[r];
    const absl::Time start = std::max(t0 + absl::Seconds(a.at_s), prefill_free[a.prefill]);
    const absl::Duration compute = absl::Seconds(a.tokens / c.prefill_tokens_per_s);
    for (int l = 0; l < layers; ++l) ready.emplace(start + compute * (l + 1) / layers, r, l);
    prefill_free[a.prefill] = start + compute;
  }

  // Per request and stream: bytes still to arrive (summed over layers), and when the last byte of each
  // (layer, stream) landed, kept as the latest per (request, stream).
  std::vector<std::vector<uint64_t>> left(arrivals.size() * layers, std::vector<uint64_t>(streams, 0));
  std::vector<std::vector<absl::Time>> last(arrivals.size(), std::vector<absl::Time>(streams, t0));
  uint64_t wire_bytes = 0;
  absl::Time last_byte = t0;

  while (true) {
    const absl::Time now = clock.Now();
    while (!ready.empty() && std::get<0>(ready.top()) <= now) {
      const auto [at, r, l] = ready.top();
      ready.pop();
      const SimArrival& a = arrivals[r];
      Link& link = *links[a.prefill * c.decode_daemons + a.decode];
      const std::vector<std::vector<uint64_t>>& pages = layer_pages[a.tokens];
      // Page by page, each page's streams in order: in one lane that interleaves anchors and residuals as kvtd
      // would send them; with anchor-first the lanes pull the anchors ahead.
      for (size_t p = 0; p < pages.size(); ++p) {
        for (int s = 0; s < streams; ++s) {
          left[r * layers + l][s] += pages[p][s];
          const uint8_t lane = run.policy == LanePolicy::kAnchorFirst ? static_cast<uint8_t>(s) : 0;
          const uint32_t index = static_cast<uint32_t>(p * streams + s);
          link.scheduler.Add(StreamKey{r * layers + l, index}, lane, pages[p][s], now);
        }
      }
    }
    absl::Time next = absl::InfiniteFuture();
    if (!ready.empty()) next = std::get<0>(ready.top());
    for (auto& link_ptr : links) {
      Link& link = *link_ptr;
      while (std::optional<LaneScheduler::Cut> cut = link.scheduler.Peek(now)) {
        const int64_t bytes = cut->length + static_cast<int64_t>(transport::kChunkHeaderBytes);
        if (!link.bucket.TryTake(bytes)) {
          next = std::min(next, now + std::max(link.bucket.TimeUntilAvailable(bytes), absl::Nanoseconds(1)));
          break;
        }
        link.scheduler.Commit(*cut, now);
        const absl::Time landed = std::max(now, link.wire_free) + absl::Seconds(bytes * 8 / (c.rate_gbps * 1e9));
        link.wire_free = landed;
        wire_bytes += bytes;
        last_byte = std::max(last_byte, landed);
        const size_t r = cut->key.transfer_id / layers;
        const uint32_t stream = cut->key.index % streams;
        uint64_t& remaining = left[cut->key.transfer_id][stream];
        remaining -= cut->length;
        if (remaining == 0) last[r][stream] = std::max(last[r][stream], landed);
      }
    }
    if (next == absl::InfiniteFuture()) break;
    clock.Advance(next - now);
  }

  SimResult result;
  result.run = run;
  std::vector<double> ttft, full;
  for (size_t r = 0; r < arrivals.size(); ++r) {
    SimRequestResult q;
    q.arrival_s = arrivals[r].at_s;
    const absl::Time all = *std::max_element(last[r].begin(), last[r].end());
    q.ttft_s = seconds(streams > 1 ? last[r][0] : all) - q.arrival_s;
    q.full_s = seconds(all) - q.arrival_s;
    ttft.push_back(q.ttft_s);
    full.push_back(q.full_s);
    result.requests.push_back(q);
  }
  result.ttft_p50_s = Percentile(ttft, 50);
  result.ttft_p99_s = Percentile(ttft, 99);
  result.full_p50_s = Percentile(full, 50);
  result.full_p99_s = Percentile(full, 99);
  result.wire_gb = wire_bytes / 1e9;
  result.makespan_s = seconds(last_byte);
  const double first = arrivals.empty() ? 0 : arrivals.front().at_s;
  const double span = result.makespan_s - first;
  result.link_utilization = span > 0 ? wire_bytes * 8 / (links.size() * c.rate_gbps * 1e9 * span) : 0;
  return result;
}

}  // namespace kvt::kvtctl
