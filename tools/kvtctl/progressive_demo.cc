#include "tools/kvtctl/progressive_demo.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "client/shm_segment.h"
#include "codec/codec.h"
#include "codec/eval/evaluation.h"
#include "codec/eval/metrics.h"
#include "codec/eval/synthetic_kv.h"
#include "common/cuda_util.h"
#include "common/cuda_ipc.h"
#include "common/status_macros.h"
#include "kv/float16.h"
#include "kv/kv_layout.h"
#include "kv/kv_page_io.h"
#include "kv/layout_proto.h"
#include "kv/reference_transfer.h"
#include "kv/transfer_plan.h"
#include "tools/kvtctl/daemon_process.h"
#include "tools/kvtctl/host_cpu.h"
#include "tools/kvtctl/stage_table.h"
#include "transport/bench/transport_bench.h"
#include "transport/options.h"

namespace kvt::kvtctl {
namespace {

constexpr uint32_t kBlockTokens = 16;
// Threads per daemon a run reports as its busiest.
constexpr size_t kBusiestThreads = 6;
// Most layers of synthetic KV generated at once.
constexpr int kGeneratorThreads = 16;

// The stages worth drawing under a run's layers: when each ran, on either daemon (their clocks start at the
// Offer and the Expect, a moment apart).
std::vector<StageSpan> StageSpans(const v1::ProfileResponse& prefill, const v1::ProfileResponse& decode) {
  std::vector<StageSpan> spans;
  auto add = [&spans](const v1::ProfileResponse& p, const char* stage, const char* label) {
    const v1::StageTime* t = FindStage(p, stage);
    if (t != nullptr && t->count() > 0) {
      spans.push_back({label, t->first_start_us() / 1e3, t->last_end_us() / 1e3, t->busy_us() / 1e3});
    }
  };
  add(prefill, "encode", "prefill: encode");
  add(prefill, "send", "prefill: send");
  add(decode, "arrive_anchor", "decode: anchor lands");
  add(decode, "arrive_residual", "decode: residual lands");
  add(decode, "decode_anchor", "decode: anchor decode");
  add(decode, "decode_full", "decode: full decode");
  return spans;
}

struct Cluster {
  std::string work_dir;
  std::unique_ptr<DaemonProcess> prefill;
  std::unique_ptr<DaemonProcess> decode;
  std::unique_ptr<Client> prefill_client;
  std::unique_ptr<Client> decode_client;
};

// Starts the two daemons for one link rate (the prefill daemon paces its sends at `rate_gbps`; 0 = unlimited).
absl::Status StartCluster(const DemoOptions& o, double rate_gbps, int ucx_workers, Cluster* c) {
  char dir[] = "/tmp/kvt-demo-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  c->work_dir = dir;
  auto flags = [&](const char* role) {
    return std::vector<std::string>{
        absl::StrCat("--role=", role),
        absl::StrCat("--daemon_id=demo-", role),
        absl::StrCat("--client_socket=", c->work_dir, "/", role, ".sock"),
        "--peer_listen=127.0.0.1:0",
        "--metrics_listen=127.0.0.1:0",
        absl::StrCat("--rate_gbps=", rate_gbps),
        absl::StrCat("--ucx_tls=", o.ucx_tls),
        absl::StrCat("--ucx_workers=", ucx_workers),
        absl::StrCat("--codec_threads=", o.codec_threads),
        absl::StrCat("--page_tokens=", o.page_tokens),
        absl::StrCat("--chunk_kib=", ChunkBytes(o) >> 10),
        "--log_level=warn",
    };
  };
  KVT_ASSIGN_OR_RETURN(c->prefill, DaemonProcess::Launch(o.kvtd, "prefill", flags("prefill"), c->work_dir,
                                                         absl::Seconds(20)));
  KVT_ASSIGN_OR_RETURN(c->decode, DaemonProcess::Launch(o.kvtd, "decode", flags("decode"), c->work_dir,
                                                        absl::Seconds(20)));
  ClientOptions co;
  co.socket = c->prefill->client_socket();
  KVT_ASSIGN_OR_RETURN(c->prefill_client, Client::Connect(co));
  co.socket = c->decode->client_socket();
  KVT_ASSIGN_OR_RETURN(c->decode_client, Client::Connect(co));
  return absl::OkStatus();
}

// The demo engine's KV cache: a shared-memory segment, or (--gpu) device memory exported over CUDA IPC with a
// host mirror the demo fills and reads back.
class DemoKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<DemoKvCache>> Create(const std::string& shm_name, uint64_t bytes, int gpu) {
    auto cache = std::unique_ptr<DemoKvCache>(new DemoKvCache());
    cache->gpu_ = gpu;
    if (gpu < 0) {
      KVT_ASSIGN_OR_RETURN(cache->shm_, client::ShmSegment::Create(shm_name, bytes));
      return cache;
    }
    KVT_RETURN_IF_ERROR(UseCudaDevice(gpu));
    KVT_ASSIGN_OR_RETURN(cache->device_, DeviceBuffer::Create(bytes));
    cache->mirror_.assign(bytes, 0);
    KVT_RETURN_IF_ERROR(cache->Upload());
    return cache;
  }

  // The bytes the demo writes and reads: the segment itself, or the GPU region's host mirror.
  absl::Span<uint8_t> host() { return shm_ ? absl::MakeSpan(shm_->data(), shm_->size()) : absl::MakeSpan(mirror_); }
  absl::Status Upload() {
    return gpu_ < 0 ? absl::OkStatus() : ::kvt::CopyToDevice(device_->get(), mirror_.data(), mirror_.size());
  }
  absl::Status Download() {
    return gpu_ < 0 ? absl::OkStatus() : ::kvt::CopyToHost(mirror_.data(), device_->get(), mirror_.size());
  }
  absl::Status Clear() {
    std::memset(host().data(), 0, host().size());
    return Upload();
  }
  absl::Status Register(Client& client, const std::string& id, const v1::KvLayout& layout) {
    if (gpu_ < 0) return client.RegisterRegion(id, layout, shm_->name(), shm_->size());
    KVT_ASSIGN_OR_RETURN(std::string handle, ExportCudaIpcHandle(device_->get(), gpu_));
    return client.RegisterGpuRegion(id, layout, handle, device_->size(), gpu_);
  }

 private:
  DemoKvCache() = default;
  int gpu_ = -1;
  std::unique_ptr<client::ShmSegment> shm_;
  std::unique_ptr<DeviceBuffer> device_;
  std::vector<uint8_t> mirror_;
};

// What a decode of `stages` streams gives for one layer's K or V, paged as the daemons page it.
absl::StatusOr<std::vector<float>> LocalDecode(const codec::Scheme& scheme, const std::vector<float>& x, int tokens,
                                               int channels, int page_tokens, int stages) {
  KVT_ASSIGN_OR_RETURN(kv::TransferPlan plan,
                       kv::MakeTransferPlan(scheme, 0, 1, tokens, page_tokens, channels));  // kvtd's chunk: the scheme's
  std::vector<float> out(x.size());
  for (const kv::PlannedPage& page : plan.layers[0]) {
    if (page.spec.kind != 0) continue;
    const size_t offset = static_cast<size_t>(page.spec.first_token) * channels;
    const int t = static_cast<int>(page.spec.tokens);
    KVT_ASSIGN_OR_RETURN(codec::EncodedPage enc, codec::EncodePage(scheme, {}, {x.data() + offset, t, channels}));
    KVT_RETURN_IF_ERROR(codec::DecodePage(enc.bytes, std::min(stages, scheme.num_streams()),
                                          {out.data() + offset, t, channels}));
  }
  return out;
}

// Layer `layer`'s K (kind 0) or V of a request as float [tokens, channels].
absl::StatusOr<std::vector<float>> ReadLayer(const kv::KvLayout& layout, absl::Span<const uint8_t> region,
                                             const std::vector<uint32_t>& blocks, int tokens, int layer, int kind) {
  std::vector<float> out(static_cast<size_t>(tokens) * layout.spec().num_kv_heads * layout.spec().head_dim);
  KVT_RETURN_IF_ERROR(kv::GatherPage(layout, region, blocks,
                                         kv::PageSpec{static_cast<uint32_t>(layer), static_cast<uint32_t>(kind),
                                                          0, static_cast<uint32_t>(tokens)},
                                         absl::MakeSpan(out)));
  return out;
}

// Whether layers `layers` of the decode region hold exactly what the codec's own full decode of the source
// gives, rounded to the region's dtype (the daemons' contract, CPU or GPU path alike).
absl::StatusOr<bool> VerifyLayers(const kv::KvLayout& layout, absl::Span<const uint8_t> src,
                                  const std::vector<uint32_t>& src_blocks, absl::Span<const uint8_t> dst,
                                  const std::vector<uint32_t>& dst_blocks, int tokens, int page_tokens,
                                  const codec::Scheme& scheme, const std::vector<int>& layers) {
  kv::ReferenceTransfer t;
  t.src_layout = &layout;
  t.src = src;
  t.src_blocks = src_blocks;
  t.dst_layout = &layout;
  t.dst_blocks = dst_blocks;
  t.num_tokens = tokens;
  t.page_tokens = static_cast<uint32_t>(page_tokens);
  t.scheme = scheme;
  t.layers = layers;
  std::vector<uint8_t> expected(dst.begin(), dst.end());
  KVT_RETURN_IF_ERROR(kv::ApplyReferenceTransfer(t, absl::MakeSpan(expected)));
  return std::equal(expected.begin(), expected.end(), dst.begin());
}

struct EvalLayer {
  int layer = 0;
  std::vector<float> k, v;
  std::unique_ptr<codec::eval::AttentionProbe> probe;
};

}  // namespace

uint32_t ChunkBytes(const DemoOptions& o) {
  return o.chunk_kib > 0 ? static_cast<uint32_t>(o.chunk_kib) << 10 : transport::Options().chunk_bytes;
}

const SchemeRun* DemoReport::Find(absl::string_view scheme, double rate_gbps) const {
  for (const SchemeRun& r : runs) {
    if (r.scheme == scheme && r.rate_gbps == rate_gbps) return &r;
  }
  return nullptr;
}

double DemoReport::IdealMs(const SchemeRun& run) {
  return run.rate_gbps > 0 ? run.wire_bytes * 8.0 / (run.rate_gbps * 1e9) * 1e3 : 0;
}

std::string DemoReport::NotLinkBoundBecause(double rate_gbps) const {
  const SchemeRun* int8 = Find("int8", rate_gbps);
  const double ideal = int8 != nullptr ? IdealMs(*int8) : 0;
  if (ideal <= 0 || int8->full_ms <= kNotLinkBoundOverIdeal * ideal) return "";
  std::string why = absl::StrFormat("int8's run took %.1f x the time its bytes need at %.2f Gbit/s",
                                    int8->full_ms / ideal, rate_gbps);
  if (int8->host_steal) absl::StrAppendFormat(&why, " (host CPU steal %.0f%%)", 100 * *int8->host_steal);
  return why;
}

absl::StatusOr<DemoReport> RunProgressiveDemo(const DemoOptions& o, const DemoProgress& progress) {
  KVT_ASSIGN_OR_RETURN(codec::eval::SyntheticKvOptions kv, codec::eval::SyntheticKvOptions::ForModel(o.model, o.tokens));
  kv.seed = o.seed;
  if (o.layers < 0 || o.layers > kv.model.layers) {
    return absl::InvalidArgumentError(absl::StrFormat("--layers must be 0..%d for %s", kv.model.layers, o.model));
  }
  if (o.rates_gbps.empty()) return absl::InvalidArgumentError("give at least one --rate-gbps");
  for (double r : o.rates_gbps) {
    if (!(r >= 0)) return absl::InvalidArgumentError("every --rate-gbps must be >= 0 (0 = unlimited)");
  }
  if (o.ucx_workers < 0 || o.ucx_workers > transport::kMaxUcxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--ucx-workers must be 0..%d (0 = kvtd's default)", transport::kMaxUcxWorkers));
  }
  if (o.warmup_tokens < 1) return absl::InvalidArgumentError("--warmup-tokens must be >= 1");
  if (o.chunk_kib != 0) {  // 0: kvtd's default
    KVT_RETURN_IF_ERROR(transport::ChunkBytesFromKib(o.chunk_kib, "--chunk-kib").status());
  }
  if (o.page_tokens != 0 && (o.page_tokens < 32 || o.page_tokens > 65536 || o.page_tokens % 32 != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--page-tokens %d must be 0 (kvtd's choice) or a multiple of 32 (every scheme's chunk divides it) in "
        "[32, 65536]",
        o.page_tokens));
  }
  std::vector<codec::Scheme> schemes;
  for (const std::string& name : o.schemes) {
    KVT_ASSIGN_OR_RETURN(codec::Scheme s, codec::ParseScheme(name));
    schemes.push_back(s);
  }
  DemoReport report;
  report.options = o;
  report.layers = o.layers == 0 ? kv.model.layers : o.layers;
  report.kv_heads = kv.model.kv_heads;
  report.head_dim = kv.model.head_dim;
  report.ucx_workers = o.ucx_workers > 0
                           ? o.ucx_workers
                           : transport::DefaultUcxWorkers(static_cast<int>(std::thread::hardware_concurrency()));
  const int channels = kv.model.channels();
  const int total_tokens = std::max(o.tokens, o.warmup_tokens);
  const uint32_t blocks = static_cast<uint32_t>((total_tokens + kBlockTokens - 1) / kBlockTokens);
  const kv::KvLayoutSpec spec =
      kv::DenseLayoutSpec(report.layers, blocks, kBlockTokens, kv.model.kv_heads, kv.model.head_dim);
  const uint64_t region_bytes = spec.layer_stride_bytes * spec.num_layers;
  report.kv_bytes_bf16 = uint64_t{2} * report.layers * o.tokens * channels * 2;
  report.transports = absl::StrCat("UCX ", o.ucx_tls, " on loopback, ", report.ucx_workers, " UCX worker(s) a daemon");

  // The engines' KV caches: blocks in a scattered order, as a paged cache holds them.
  const std::string stem = absl::StrCat("/kvt-demo-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
  KVT_ASSIGN_OR_RETURN(auto src_kv, DemoKvCache::Create(stem + "-prefill", region_bytes, o.gpu));
  KVT_ASSIGN_OR_RETURN(auto dst_kv, DemoKvCache::Create(stem + "-decode", region_bytes, o.gpu));
  KVT_ASSIGN_OR_RETURN(kv::KvLayout layout, kv::KvLayout::Create(spec, region_bytes));
  std::vector<uint32_t> src_blocks(blocks), dst_blocks(blocks);
  std::iota(src_blocks.begin(), src_blocks.end(), 0);
  std::iota(dst_blocks.begin(), dst_blocks.end(), 0);
  std::shuffle(src_blocks.begin(), src_blocks.end(), std::mt19937(1));
  std::shuffle(dst_blocks.begin(), dst_blocks.end(), std::mt19937(2));

  const std::vector<int> eval_layer_ids = codec::eval::SampleLayers(report.layers, o.eval_layers);
  std::vector<EvalLayer> eval;
  const codec::eval::HeadLayout heads{o.tokens, kv.model.kv_heads, kv.model.head_dim, kv.model.query_heads};
  // One layer: generated (each layer has RNG streams of its own, so the values do not depend on the order),
  // written into its own blocks of the source region, and kept for the fidelity check if it is an eval layer.
  auto make_layer = [&](int l, std::optional<EvalLayer>* kept) -> absl::Status {
    codec::eval::LayerKv layer = codec::eval::GenerateLayer(kv, l);
    const kv::PageSpec whole_k{static_cast<uint32_t>(l), 0, 0, static_cast<uint32_t>(o.tokens)};
    const kv::PageSpec whole_v{static_cast<uint32_t>(l), 1, 0, static_cast<uint32_t>(o.tokens)};
    const absl::Span<uint8_t> region = src_kv->host();
    KVT_RETURN_IF_ERROR(kv::ScatterPage(layout, region, src_blocks, whole_k, layer.k, 0, kv.model.kv_heads));
    KVT_RETURN_IF_ERROR(kv::ScatterPage(layout, region, src_blocks, whole_v, layer.v, 0, kv.model.kv_heads));
    if (std::find(eval_layer_ids.begin(), eval_layer_ids.end(), l) != eval_layer_ids.end()) {
      EvalLayer e;
      e.layer = l;
      codec::eval::QueryOptions q;
      q.queries_per_head = o.queries;
      q.seed = o.seed + l;
      KVT_ASSIGN_OR_RETURN(codec::eval::AttentionProbe probe,
                           codec::eval::AttentionProbe::Create(layer.k, layer.v, heads, q));
      e.probe = std::make_unique<codec::eval::AttentionProbe>(std::move(probe));
      e.k = std::move(layer.k);
      e.v = std::move(layer.v);
      kept->emplace(std::move(e));
    }
    return absl::OkStatus();
  };
  // Several layers at once (a 32k-token request's 2 billion values took minutes on one thread), a batch at a
  // time so that at most one batch of layers is in memory besides the region, and progress comes from here.
  const int parallel = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kGeneratorThreads);
  for (int first = 0; first < report.layers; first += parallel) {
    const int count = std::min(parallel, report.layers - first);
    progress(absl::StrFormat("generating synthetic %s KV: layers %d-%d of %d", o.model, first + 1, first + count,
                             report.layers),
             true);
    std::vector<absl::Status> statuses(count);
    std::vector<std::optional<EvalLayer>> kept(count);
    std::vector<std::thread> threads;
    for (int i = 1; i < count; ++i) {
      threads.emplace_back([&, i] { statuses[i] = make_layer(first + i, &kept[i]); });
    }
    statuses[0] = make_layer(first, &kept[0]);
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < count; ++i) {
      KVT_RETURN_IF_ERROR(statuses[i]);
      if (kept[i]) eval.push_back(*std::move(kept[i]));
    }
  }
  KVT_RETURN_IF_ERROR(src_kv->Upload());
  const v1::KvLayout proto = kv::LayoutToProto(spec);
  std::vector<uint32_t> all_layers(report.layers);
  std::iota(all_layers.begin(), all_layers.end(), 0);

  const size_t total_runs = o.rates_gbps.size() * schemes.size();
  for (size_t r = 0; r < o.rates_gbps.size(); ++r) {
    const double rate = o.rates_gbps[r];
    const std::string rate_name = rate > 0 ? absl::StrFormat("%g Gbit/s", rate) : std::string("unlimited");
    progress(absl::StrFormat("starting two kvtd daemons (%s, UCX %s, %d worker(s))", rate_name, o.ucx_tls,
                             report.ucx_workers),
             false);
    Cluster cluster;
    KVT_RETURN_IF_ERROR(StartCluster(o, rate, report.ucx_workers, &cluster));
    KVT_RETURN_IF_ERROR(src_kv->Register(*cluster.prefill_client, "kv", proto));
    KVT_RETURN_IF_ERROR(dst_kv->Register(*cluster.decode_client, "kv", proto));

    auto transfer = [&](const std::string& id, const std::string& scheme, uint64_t tokens,
                        const std::function<void(const v1::TransferEvent&)>& on_event) -> absl::Status {
      const uint32_t used = static_cast<uint32_t>((tokens + kBlockTokens - 1) / kBlockTokens);
      ExpectSpec expect;
      expect.request_id = id;
      expect.region_id = "kv";
      expect.block_ids.assign(dst_blocks.begin(), dst_blocks.begin() + used);
      expect.num_tokens = tokens;
      expect.source_daemon = cluster.prefill->daemon_id();
      expect.deadline = absl::Minutes(5);
      KVT_RETURN_IF_ERROR(cluster.decode_client->Expect(expect));
      OfferSpec offer;
      offer.request_id = id;
      offer.region_id = "kv";
      offer.block_ids.assign(src_blocks.begin(), src_blocks.begin() + used);
      offer.num_tokens = tokens;
      offer.ready_layers = all_layers;
      offer.scheme = scheme;
      offer.decode_daemon = cluster.decode->peer_address();
      offer.deadline = absl::Minutes(5);
      KVT_RETURN_IF_ERROR(cluster.prefill_client->Offer(offer));
      KVT_RETURN_IF_ERROR(cluster.decode_client->Watch(id, on_event, absl::Minutes(5), v1::SIDE_DECODE));
      // The prefill side counts a layer's bytes right after handing it to the transport, which can be after the
      // decode side has it all: wait for the prefill side's end too (a finished request replays its events), so
      // the byte counters read after this call hold every layer of this run and none of it spills into the next.
      return cluster.prefill_client->Watch(
          id, [](const v1::TransferEvent&) {}, absl::Minutes(1), v1::SIDE_PREFILL);
    };
    // Connects the daemons (gRPC, Hello, UCX) outside the timed runs; with --warmup-tokens, also fills their
    // buffer pools.
    progress("warming up the daemon-to-daemon connection", true);
    KVT_RETURN_IF_ERROR(
        transfer(absl::StrCat("demo-warmup-", r), "int8", o.warmup_tokens, [](const v1::TransferEvent&) {}));

    for (size_t i = 0; i < schemes.size(); ++i) {
      const std::string name = o.schemes[i];
      const size_t n = r * schemes.size() + i + 1;
      const std::string id = absl::StrFormat("demo-%s-%g", name, rate);
      KVT_RETURN_IF_ERROR(dst_kv->Clear());
      KVT_ASSIGN_OR_RETURN(v1::StatsResponse before, cluster.prefill_client->Stats());
      SchemeRun run;
      run.scheme = name;
      run.rate_gbps = rate;
      run.timeline.label = total_runs > schemes.size() ? absl::StrCat(name, " @ ", rate_name) : name;
      run.timeline.layers.resize(report.layers);
      for (int l = 0; l < report.layers; ++l) run.timeline.layers[l].layer = l;
      int anchors = 0, fulls = 0;
      const absl::StatusOr<CpuTimes> cpu_before = ReadCpuTimes();
      const auto prefill_cpu = transport::SampleThreadCpu(cluster.prefill->pid());
      const auto decode_cpu = transport::SampleThreadCpu(cluster.decode->pid());
      const absl::Time started = absl::Now();
      KVT_RETURN_IF_ERROR(transfer(id, name, o.tokens, [&](const v1::TransferEvent& e) {
        const double ms = e.at_us() / 1000.0;
        if (e.kind() == v1::TransferEvent::ANCHOR_READY && e.layer() < run.timeline.layers.size()) {
          run.timeline.layers[e.layer()].anchor_ms = ms;
          run.anchor_ms = std::max(run.anchor_ms, ms);
          ++anchors;
        } else if (e.kind() == v1::TransferEvent::FULL_READY && e.layer() < run.timeline.layers.size()) {
          run.timeline.layers[e.layer()].full_ms = ms;
          run.full_ms = std::max(run.full_ms, ms);
          ++fulls;
        } else if (e.kind() == v1::TransferEvent::DONE) {
          run.timeline.done_ms = ms;
        }
        progress(absl::StrFormat("[%d/%d] %-6s %s: layers at anchor %2d/%d, at full precision %2d/%d", n, total_runs,
                                 name, rate_name, anchors, report.layers, fulls, report.layers),
                 true);
      }));
      const double wall = absl::ToDoubleSeconds(absl::Now() - started);
      run.prefill_threads = transport::BusiestThreads(prefill_cpu, transport::SampleThreadCpu(cluster.prefill->pid()),
                                                      wall, kBusiestThreads);
      run.decode_threads = transport::BusiestThreads(decode_cpu, transport::SampleThreadCpu(cluster.decode->pid()),
                                                     wall, kBusiestThreads);
      if (const absl::StatusOr<CpuTimes> cpu_after = ReadCpuTimes(); cpu_before.ok() && cpu_after.ok()) {
        run.host_ticks = cpu_after->total >= cpu_before->total ? cpu_after->total - cpu_before->total : 0;
        if (const std::optional<CpuShare> share = ShareBetween(*cpu_before, *cpu_after)) {
          run.host_steal = share->steal;
          run.host_busy = share->busy;
        }
      }
      KVT_ASSIGN_OR_RETURN(v1::StatsResponse after, cluster.prefill_client->Stats());
      run.anchor_bytes = after.anchor_bytes_sent() - before.anchor_bytes_sent();
      run.wire_bytes = run.anchor_bytes + after.residual_bytes_sent() - before.residual_bytes_sent();
      KVT_ASSIGN_OR_RETURN(run.prefill_profile, cluster.prefill_client->Profile(id, v1::SIDE_PREFILL));
      KVT_ASSIGN_OR_RETURN(run.decode_profile, cluster.decode_client->Profile(id, v1::SIDE_DECODE));
      run.timeline.stages = StageSpans(run.prefill_profile, run.decode_profile);

      // Fidelity: full = what the decode blocks hold now; anchor = the same pages decoded from stream 0 alone.
      KVT_RETURN_IF_ERROR(dst_kv->Download());
      if (o.verify) {
        KVT_ASSIGN_OR_RETURN(run.verified_identical,
                             VerifyLayers(layout, src_kv->host(), src_blocks, dst_kv->host(), dst_blocks, o.tokens,
                                          o.page_tokens, schemes[i], eval_layer_ids));
      }
      codec::eval::MeanAccumulator anchor_acc, full_acc;
      for (const EvalLayer& e : eval) {
        KVT_ASSIGN_OR_RETURN(std::vector<float> k_full,
                             ReadLayer(layout, dst_kv->host(), dst_blocks, o.tokens, e.layer, 0));
        KVT_ASSIGN_OR_RETURN(std::vector<float> v_full,
                             ReadLayer(layout, dst_kv->host(), dst_blocks, o.tokens, e.layer, 1));
        KVT_ASSIGN_OR_RETURN(codec::eval::MeanAccumulator f, e.probe->Evaluate(k_full, v_full));
        full_acc.Merge(f);
        KVT_ASSIGN_OR_RETURN(std::vector<float> k_anchor,
                             LocalDecode(schemes[i], e.k, o.tokens, channels, o.page_tokens, 1));
        KVT_ASSIGN_OR_RETURN(std::vector<float> v_anchor,
                             LocalDecode(schemes[i], e.v, o.tokens, channels, o.page_tokens, 1));
        // The decode blocks hold bf16: round the anchor view the same way.
        for (std::vector<float>* x : {&k_anchor, &v_anchor}) {
          for (float& value : *x) value = kv::Bf16BitsToFloat(kv::FloatToBf16Bits(value));
        }
        KVT_ASSIGN_OR_RETURN(codec::eval::MeanAccumulator a, e.probe->Evaluate(k_anchor, v_anchor));
        anchor_acc.Merge(a);
      }
      run.vnmse_anchor = anchor_acc.mean();
      run.vnmse_full = full_acc.mean();
      progress(absl::StrFormat("[%d/%d] %-6s %s: anchor %.1f ms, full %.1f ms, %.1f MB on the wire", n, total_runs,
                               name, rate_name, run.anchor_ms, run.full_ms, run.wire_bytes / 1e6),
               false);
      report.runs.push_back(std::move(run));
    }
    (void)cluster.prefill_client->UnregisterRegion("kv");
    (void)cluster.decode_client->UnregisterRegion("kv");
  }

  // The data plane alone, same transport and workers, after the daemons are gone (their cores free).
  if (o.data_plane_bytes > 0 && std::find(o.rates_gbps.begin(), o.rates_gbps.end(), 0.0) != o.rates_gbps.end()) {
    progress(absl::StrFormat("measuring the data plane alone (%s, %d worker(s), %.0f MiB)", o.ucx_tls,
                             report.ucx_workers, o.data_plane_bytes / 1048576.0),
             false);
    transport::TransportBenchOptions bench;
    bench.transports = {o.ucx_tls};
    bench.ucx_workers = {report.ucx_workers};
    bench.chunk_bytes = ChunkBytes(o);  // the daemons' chunk
    bench.unthrottled_bytes = o.data_plane_bytes;
    bench.rates_gbps = {};
    bench.one_chunk_source = false;
    bench.run_perftest = false;
    KVT_ASSIGN_OR_RETURN(transport::TransportBenchReport b, transport::RunTransportBench(bench));
    if (b.unthrottled.empty()) return absl::InternalError("the transport bench measured nothing");
    DataPlaneReference ref;
    ref.transport = o.ucx_tls;
    ref.ucx_workers = report.ucx_workers;
    ref.chunk_bytes = bench.chunk_bytes;
    ref.bytes = b.unthrottled[0].bytes;
    ref.goodput_gbps = b.unthrottled[0].goodput_gbps;
    report.data_plane = ref;
  }
  return report;
}

}  // namespace kvt::kvtctl
