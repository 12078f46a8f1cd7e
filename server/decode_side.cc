#include "server/decode_side.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "codec/codec.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "proto/kvt/v1/peer.grpc.pb.h"
#include "server/gpu_pages.h"
#include "server/kv_page_io.h"
#include "server/page_plan.h"

namespace kvt::server {
namespace {

constexpr absl::Duration kPumpTick = absl::Milliseconds(20);
// The most pages one GPU decode call takes: bounds each slot's staging (~290 KB of lynx a page) while keeping
// the per-call cost spread over many pages.
constexpr size_t kMaxGpuDecodeBatch = 32;

uint32_t TotalHeads(const KvLayoutSpec& s) { return s.total_kv_heads == 0 ? s.num_kv_heads : s.total_kv_heads; }

}  // namespace

class DecodeSide::InboundRequest : public std::enable_shared_from_this<InboundRequest> {
 public:
  InboundRequest(DaemonContext* context, ExpectArgs args, RegionLease region, std::shared_ptr<RequestRecord> record)
      : context_(context),
        args_(std::move(args)),
        record_(std::move(record)),
        deadline_(record_->events.start() + args_.deadline),
        region_(std::move(region)) {}

  const std::string& id() const { return args_.request_id; }
  absl::Time deadline() const { return deadline_; }
  uint64_t first_transfer_id() const { return first_transfer_id_; }
  size_t num_layers() const { return layers_.size(); }

  // Checks the source's announcement against this request and builds the page states. Called once, with
  // DecodeSide::mu_ held (so `opened` cannot race).
  absl::Status Accept(const OpenArgs& open, uint64_t first_transfer_id) {
    kvt::MutexLock lock(&mu_);
    if (opened_) {
      return absl::AlreadyExistsError(absl::StrCat("request \"", args_.request_id, "\" was already opened"));
    }
    if (!status_.ok()) return status_;
    if (!args_.source_daemon.empty() && open.source_daemon_id != args_.source_daemon) {
      return absl::PermissionDeniedError(absl::StrCat("request \"", args_.request_id, "\" expects source daemon \"",
                                                      args_.source_daemon, "\", not \"", open.source_daemon_id, "\""));
    }
    const KvLayoutSpec& dst = region_->layout().spec();
    const KvLayoutSpec& src = open.source_layout;
    if (open.num_tokens != args_.num_tokens) {
      return absl::InvalidArgumentError(absl::StrFormat("the source sends %d tokens, Expect asked for %d",
                                                        open.num_tokens, args_.num_tokens));
    }
    if (src.num_layers != dst.num_layers || src.head_dim != dst.head_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layouts disagree: source has %d layers of head_dim %d, this region %d layers of head_dim %d",
          src.num_layers, src.head_dim, dst.num_layers, dst.head_dim));
    }
    if (TotalHeads(src) != TotalHeads(dst) || dst.head_begin < src.head_begin ||
        dst.head_begin + dst.num_kv_heads > src.head_begin + src.num_kv_heads) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "this region holds heads [%d, %d) of %d; the source sends heads [%d, %d) of %d, which must cover them",
          dst.head_begin, dst.head_begin + dst.num_kv_heads, TotalHeads(dst), src.head_begin,
          src.head_begin + src.num_kv_heads, TotalHeads(src)));
    }
    KVT_ASSIGN_OR_RETURN(TransferPlan plan,
                         MakeTransferPlan(open.scheme, open.chunk_tokens, src.num_layers, open.num_tokens,
                                          open.page_tokens, src.num_kv_heads * src.head_dim));
    if (plan.page_tokens != open.page_tokens) {
      return absl::InvalidArgumentError(absl::StrFormat("page_tokens %d is not a whole number of %d-token chunks",
                                                        open.page_tokens, open.chunk_tokens));
    }
    size_t n = 0;
    for (const auto& layer : plan.layers) {
      for (const PlannedPage& expected : layer) {
        if (n >= open.pages.size()) {
          return absl::InvalidArgumentError(absl::StrFormat("the source announced %d pages, the plan has more",
                                                            open.pages.size()));
        }
        const PlannedPage& got = open.pages[n++];
        if (got.spec.layer != expected.spec.layer || got.spec.kind != expected.spec.kind ||
            got.spec.first_token != expected.spec.first_token || got.spec.tokens != expected.spec.tokens ||
            got.stream_bytes != expected.stream_bytes) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "announced page %d (layer %d kind %d tokens [%d, +%d)) differs from this daemon's plan for scheme %s",
              n - 1, got.spec.layer, got.spec.kind, got.spec.first_token, got.spec.tokens, open.scheme.Name()));
        }
      }
    }
    if (n != open.pages.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the source announced %d pages, the plan has %d", open.pages.size(), n));
    }
    if (region_->on_gpu()) {
      if (dst.head_begin != src.head_begin || dst.num_kv_heads != src.num_kv_heads) {
        return absl::InvalidArgumentError(
            "a GPU region must hold the same heads as the source (the GPU path does not re-slice heads yet)");
      }
      KVT_RETURN_IF_ERROR(CheckGpuPlan(region_->layout(), plan));
    }
    scheme_ = open.scheme;
    source_heads_begin_ = src.head_begin;
    source_heads_ = src.num_kv_heads;
    channels_ = plan.channels;
    source_address_ = open.source_address;
    first_transfer_id_ = first_transfer_id;
    layers_.resize(plan.layers.size());
    for (size_t l = 0; l < plan.layers.size(); ++l) {
      for (PlannedPage& p : plan.layers[l]) {
        PageState state;
        state.plan = std::move(p);
        uint64_t offset = 0;
        for (uint64_t b : state.plan.stream_bytes) {
          state.stream_offset.push_back(offset);
          offset += b;
        }
        layers_[l].pages.push_back(std::move(state));
      }
    }
    opened_ = true;
    opened_at_ = absl::Now();
    RecordStage(*context_, *record_, Stage::kRendezvous, record_->events.start(), opened_at_);
    if (!source_address_.empty()) {
      context_->liveness->Watch(source_address_);
      watching_source_ = true;
    }
    record_->SetLabels(scheme_.Name(), open.source_daemon_id);
    return absl::OkStatus();
  }

  // The data-plane streams of layer `layer`, for Transport::Expect.
  std::vector<transport::StreamBounds> Bounds(uint32_t layer) {
    kvt::MutexLock lock(&mu_);
    std::vector<transport::StreamBounds> bounds;
    const auto& pages = layers_[layer].pages;
    for (size_t i = 0; i < pages.size(); ++i) {
      for (size_t s = 0; s < pages[i].plan.stream_bytes.size(); ++s) {
        bounds.push_back({static_cast<uint32_t>(i), static_cast<uint8_t>(s), pages[i].plan.stream_bytes[s]});
      }
    }
    return bounds;
  }

  // A verified chunk of layer `layer` (the data plane checked it lies inside its stream).
  void OnChunk(uint32_t layer, const transport::ReceivedChunk& chunk) {
    const transport::ChunkHeader& h = chunk.header();
    bool schedule = false;
    bool gpu = false;   // read under mu_ with the page's kind: the task's arguments
    uint32_t kind = 0;
    {
      kvt::MutexLock lock(&mu_);
      if (!status_.ok() || finished_) return;
      const absl::Time now = absl::Now();
      RecordStage(*context_, *record_, h.stage == 0 ? Stage::kArriveAnchor : Stage::kArriveResidual, now, now,
                  h.length, /*metrics=*/false);
      PageState& page = layers_[layer].pages[h.page];
      if (page.container.empty()) page.container.resize(page.plan.total_bytes());
      std::memcpy(page.container.data() + page.stream_offset[h.stage] + h.offset, chunk.payload().data(),
                  h.length);
      if (chunk.stream_complete()) {
        page.streams_complete |= 1u << h.stage;
        int available = 0;
        while (available < static_cast<int>(page.plan.stream_bytes.size()) &&
               (page.streams_complete >> available & 1u)) {
          ++available;
        }
        if (available > page.stages_available) page.decodable_since = now;
        page.stages_available = available;
        gpu = region_->on_gpu();
        kind = page.plan.spec.kind;
        if (gpu) {
          // One task per layer and kind decodes whatever has arrived in batches: a launch per batch, not per page.
          bool& scheduled = layers_[layer].gpu_task_scheduled[kind];
          if (page.stages_available > page.stages_decoded && !scheduled) {
            scheduled = true;
            ++active_tasks_;
            schedule = true;
          }
        } else if (page.stages_available > page.stages_decoded && !page.decode_scheduled) {
          page.decode_scheduled = true;
          ++active_tasks_;
          schedule = true;
        }
      }
    }
    if (schedule) {
      std::shared_ptr<InboundRequest> self = shared_from_this();
      if (gpu) {
        context_->workers->Submit([self, layer, kind] { self->GpuDecodeTask(layer, kind); });
      } else {
        context_->workers->Submit([self, layer, page = h.page] { self->DecodeTask(layer, page); });
      }
    }
  }

  // Fails the request (first failure wins): cancels its data-plane transfers, tells the peer if asked.
  void Fail(const absl::Status& status, bool notify_peer) {
    std::string peer;
    size_t layers = 0;
    {
      kvt::MutexLock lock(&mu_);
      if (!status_.ok() || finished_) return;
      status_ = status;
      peer = notify_peer ? source_address_ : "";
      layers = layers_.size();
    }
    StopTransfers(peer, status, layers);
    Finish(status);
  }

  // At the deadline: DONE at anchor precision when allowed and every layer's anchor is in place, else
  // DEADLINE_EXCEEDED.
  void Expire() {
    bool anchor_complete = false;
    size_t layers = 0;
    {
      kvt::MutexLock lock(&mu_);
      anchor_complete = opened_ && record_->layers_anchor_ready.load() == layers_.size();
      layers = layers_.size();
    }
    if (args_.allow_anchor_only && anchor_complete) {
      Logger("server")->warn("request {}: deadline passed before the residual; finishing at anchor precision",
                             args_.request_id);
      StopTransfers(source_address_, absl::CancelledError("the decode side finished at anchor precision"), layers);
      Finish(absl::OkStatus());
      return;
    }
    Fail(absl::DeadlineExceededError(absl::StrFormat(
             "request %s: not complete within its %s deadline (%d of %d layers at full precision)", args_.request_id,
             absl::FormatDuration(args_.deadline), record_->layers_full_ready.load(), record_->num_layers.load())),
         /*notify_peer=*/true);
  }

  bool finished() const {
    kvt::MutexLock lock(&mu_);
    return finished_;
  }

  // Whether the prefill daemon this request comes from stopped answering its control plane.
  bool SourceDead() const {
    kvt::MutexLock lock(&mu_);
    return watching_source_ && !finished_ && context_->liveness->Dead(source_address_);
  }
  std::string source_address() const {
    kvt::MutexLock lock(&mu_);
    return source_address_;
  }

  // Tells the peer why (if `peer` is set), then cancels the layers' data-plane transfers, on the worker pool so
  // that a slow or dead peer never blocks the pump. The peer goes first: once the transfers are cancelled here,
  // its chunks are rejected (NOT_FOUND), and it should hear the real reason from us rather than that rejection.
  void StopTransfers(std::string peer, absl::Status why, size_t layers) {
    std::shared_ptr<InboundRequest> self = shared_from_this();
    context_->workers->Submit([self, peer = std::move(peer), why = std::move(why), layers] {
      if (!peer.empty()) self->context_->peers->CancelOnPeer(peer, self->args_.request_id, why);
      for (size_t l = 0; l < layers; ++l) self->context_->transport->Cancel(self->first_transfer_id_ + l);
    });
  }

 private:
  struct PageState {
    PlannedPage plan;
    std::vector<uint64_t> stream_offset;
    std::vector<uint8_t> container;  // allocated at the first chunk, freed after the full decode
    uint32_t streams_complete = 0;   // bit s: stream s arrived whole
    int stages_available = 0;        // leading complete streams
    int stages_decoded = 0;          // what the engine's blocks hold
    bool decode_scheduled = false;
    absl::Time decodable_since;      // when stages_available last grew
  };
  struct LayerState {
    std::vector<PageState> pages;
    size_t pages_anchor = 0;
    size_t pages_full = 0;
    // GPU regions: whether a GpuDecodeTask drains this layer's decodable pages of kind K (0) or V (1).
    std::array<bool, 2> gpu_task_scheduled{};
  };

  void DecodeTask(uint32_t layer, uint32_t page_index) {
    while (true) {
      int stages = 0;
      const uint8_t* container = nullptr;
      size_t container_bytes = 0;
      PageSpec spec;
      bool full = false;
      absl::Time decodable_since;
      {
        kvt::MutexLock lock(&mu_);
        PageState& page = layers_[layer].pages[page_index];
        if (finished_ || !status_.ok() || page.stages_available <= page.stages_decoded) {
          page.decode_scheduled = false;
          if (finished_ || !status_.ok()) std::vector<uint8_t>().swap(page.container);
          TaskEndedLocked();
          return;
        }
        stages = page.stages_available;
        container = page.container.data();
        container_bytes = page.container.size();
        spec = page.plan.spec;
        full = stages == static_cast<int>(page.plan.stream_bytes.size());
        decodable_since = page.decodable_since;
      }
      const absl::Time start = absl::Now();
      // The pump writes only streams >= `stages` of this container meanwhile; these bytes are stable.
      absl::Status s = DecodeAndScatter(spec, absl::MakeConstSpan(container, container_bytes), stages);
      const absl::Time end = absl::Now();
      context_->metrics->DecodeLatency(end - start);
      RecordStage(*context_, *record_, Stage::kDecodeQueue, decodable_since, start);
      RecordStage(*context_, *record_, full ? Stage::kDecodeFull : Stage::kDecodeAnchor, start, end,
                  container_bytes);
      if (!s.ok()) {
        {
          kvt::MutexLock lock(&mu_);
          layers_[layer].pages[page_index].decode_scheduled = false;
          TaskEndedLocked();
        }
        Fail(absl::Status(s.code(), absl::StrFormat("layer %d page %d: %s", layer, page_index, s.message())),
             /*notify_peer=*/true);
        return;
      }
      bool done = false;
      {
        kvt::MutexLock lock(&mu_);
        done = PageDecodedLocked(layer, page_index, stages);
      }
      if (done) Finish(absl::OkStatus());
    }
  }

  // GPU regions: decodes layer `layer`'s pages of `kind` as they become decodable, each round one batch of pages
  // with the same number of complete streams and length (one upload, launch and synchronization; pages still
  // without their anchor first), until none is left.
  void GpuDecodeTask(uint32_t layer, uint32_t kind) {
    while (true) {
      std::vector<uint32_t> batch;
      std::vector<PageSpec> specs;
      std::vector<absl::Span<const uint8_t>> containers;
      int stages = 0;
      absl::Time oldest = absl::InfiniteFuture();
      bool full = false;
      uint64_t bytes = 0;
      {
        kvt::MutexLock lock(&mu_);
        LayerState& ls = layers_[layer];
        if (!finished_ && status_.ok()) {
          // Pages still without their anchor go first: they are what the engine waits on.
          const bool fresh = std::any_of(ls.pages.begin(), ls.pages.end(), [kind](const PageState& page) {
            return page.plan.spec.kind == kind && page.stages_decoded == 0 && page.stages_available > 0;
          });
          for (uint32_t i = 0; i < ls.pages.size() && batch.size() < kMaxGpuDecodeBatch; ++i) {
            PageState& page = ls.pages[i];
            if (page.plan.spec.kind != kind || page.stages_available <= page.stages_decoded ||
                (page.stages_decoded == 0) != fresh) {
              continue;
            }
            if (stages == 0) stages = page.stages_available;
            // One page length a launch (a request's last page may be shorter) and one stage count.
            if (page.stages_available != stages || (!specs.empty() && page.plan.spec.tokens != specs[0].tokens)) {
              continue;
            }
            page.decode_scheduled = true;  // Finish leaves its container alone
            oldest = std::min(oldest, page.decodable_since);
            full = stages == static_cast<int>(page.plan.stream_bytes.size());
            bytes += page.container.size();
            batch.push_back(i);
            specs.push_back(page.plan.spec);
            containers.emplace_back(page.container.data(), page.container.size());
          }
        }
        if (batch.empty()) {
          ls.gpu_task_scheduled[kind] = false;
          if (finished_ || !status_.ok()) {
            for (PageState& p : ls.pages) {
              if (p.plan.spec.kind == kind) std::vector<uint8_t>().swap(p.container);
            }
          }
          TaskEndedLocked();
          return;
        }
      }
      const absl::Time start = absl::Now();
      // The pump writes only streams >= `stages` of these containers meanwhile; these bytes are stable.
      absl::Status s = DecodePagesOnGpu(*region_, args_.block_ids, specs, containers, stages);
      const absl::Time end = absl::Now();
      RecordStage(*context_, *record_, Stage::kDecodeQueue, oldest, start);
      RecordStage(*context_, *record_, full ? Stage::kDecodeFull : Stage::kDecodeAnchor, start, end, bytes);
      if (s.ok()) {
        const absl::Duration per_page = (absl::Now() - start) / static_cast<int64_t>(batch.size());
        for (size_t i = 0; i < batch.size(); ++i) context_->metrics->DecodeLatency(per_page);  // one per page
      }
      bool done = false;
      {
        kvt::MutexLock lock(&mu_);
        for (uint32_t i : batch) {
          layers_[layer].pages[i].decode_scheduled = false;
          if (s.ok()) done = PageDecodedLocked(layer, i, stages) || done;
        }
      }
      if (!s.ok()) {
        // The codec numbers the batch's containers from 0; the pages it names are these, in order.
        Fail(absl::Status(s.code(), absl::StrFormat("layer %d kind %d, a batch of pages [%s]: %s", layer, kind,
                                                    absl::StrJoin(batch, ","), s.message())),
             /*notify_peer=*/true);
        // The next round sees the failure, frees the layer's containers and ends the task.
        continue;
      }
      if (done) Finish(absl::OkStatus());
    }
  }

  // Records that page `page_index` of `layer` now holds `stages` decoded stages: the layer's anchor and full
  // events, and the page's container freed once full. Returns whether that completed the request.
  bool PageDecodedLocked(uint32_t layer, uint32_t page_index, int stages) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PageState& page = layers_[layer].pages[page_index];
    LayerState& ls = layers_[layer];
    const int full = static_cast<int>(page.plan.stream_bytes.size());
    bool done = false;
    if (page.stages_decoded == 0) {
      if (++ls.pages_anchor == ls.pages.size()) {
        record_->events.Add(EventKind::kAnchorReady, layer);
        if (record_->layers_anchor_ready.fetch_add(1) + 1 == layers_.size()) {
          context_->metrics->AnchorLatency(absl::Now() - opened_at_);
        }
      }
    }
    page.stages_decoded = stages;
    if (stages == full) {
      std::vector<uint8_t>().swap(page.container);
      if (++ls.pages_full == ls.pages.size()) {
        record_->events.Add(EventKind::kFullReady, layer);
        if (record_->layers_full_ready.fetch_add(1) + 1 == layers_.size()) {
          context_->metrics->FullLatency(absl::Now() - opened_at_);
          done = true;
        }
      }
    }
    return done;
  }

  absl::Status DecodeAndScatter(const PageSpec& spec, absl::Span<const uint8_t> container, int stages) {
    thread_local std::vector<float> values;
    values.resize(static_cast<size_t>(spec.tokens) * channels_);
    codec::MutablePageView out{values.data(), static_cast<int>(spec.tokens), static_cast<int>(channels_)};
    KVT_RETURN_IF_ERROR(codec::DecodePage(container, stages, out));
    return ScatterPage(region_->layout(), region_->bytes(), args_.block_ids, spec, values, source_heads_begin_,
                       source_heads_);
  }

  void TaskEndedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    --active_tasks_;
    if (finished_ && active_tasks_ == 0) region_ = RegionLease();
  }

  void Finish(const absl::Status& status) {
    {
      kvt::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      if (status_.ok()) status_ = status;
      // A page a decode task is reading keeps its container; the task frees it when it sees the end.
      for (LayerState& l : layers_) {
        for (PageState& p : l.pages) {
          if (!p.decode_scheduled) std::vector<uint8_t>().swap(p.container);
        }
      }
      // Running decodes finish their page first; the last one lets the region go.
      if (active_tasks_ == 0) region_ = RegionLease();
      if (watching_source_) context_->liveness->Unwatch(source_address_);
      watching_source_ = false;
    }
    FinishRecord(*context_, *record_, status);
    if (on_finished_) on_finished_(*this);
  }

 public:
  // Called once when the request finishes (set before it is published).
  std::function<void(const InboundRequest&)> on_finished_;

 private:
  DaemonContext* const context_;
  const ExpectArgs args_;
  const std::shared_ptr<RequestRecord> record_;
  const absl::Time deadline_;

  mutable kvt::Mutex mu_;
  RegionLease region_;  // released once finished and no decode runs
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool opened_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int active_tasks_ ABSL_GUARDED_BY(mu_) = 0;
  bool watching_source_ ABSL_GUARDED_BY(mu_) = false;
  // Set once by Accept (under mu_), read-only afterwards.
  codec::Scheme scheme_;
  uint32_t source_heads_begin_ = 0;
  uint32_t source_heads_ = 0;
  uint32_t channels_ = 0;
  std::string source_address_;
  uint64_t first_transfer_id_ = 0;
  absl::Time opened_at_;
  std::vector<LayerState> layers_;  // the vector is sized by Accept; entries guarded by mu_
};

DecodeSide::DecodeSide(DaemonContext* context) : context_(context) {
  pump_ = std::thread([this] { Pump(); });
}

DecodeSide::~DecodeSide() {
  std::vector<std::shared_ptr<InboundRequest>> live;
  {
    kvt::MutexLock lock(&mu_);
    for (auto& [id, r] : requests_) live.push_back(r);
  }
  for (auto& r : live) r->Fail(absl::CancelledError("the daemon is shutting down"), /*notify_peer=*/true);
  stopping_ = true;
  pump_.join();
}

absl::Status DecodeSide::Expect(const ExpectArgs& args) {
  KVT_ASSIGN_OR_RETURN(RegionLease region, context_->regions->Acquire(args.region_id));
  KVT_RETURN_IF_ERROR(CheckRequestBlocks(region->layout(), args.block_ids, args.num_tokens));
  auto record = std::make_shared<RequestRecord>(args.request_id, Side::kDecode, absl::Now());
  record->SetLabels("", args.source_daemon);
  record->num_layers = region->layout().spec().num_layers;
  auto request = std::make_shared<InboundRequest>(context_, args, std::move(region), record);
  std::weak_ptr<InboundRequest> weak = request;
  record->cancel = [weak](const absl::Status& why, bool notify_peer) {
    if (auto r = weak.lock()) r->Fail(why, notify_peer);
  };
  request->on_finished_ = [this](const InboundRequest& r) { Forget(r); };
  kvt::MutexLock lock(&mu_);
  auto it = requests_.find(args.request_id);
  if (it != requests_.end() && !it->second->finished()) {
    return absl::AlreadyExistsError(
        absl::StrCat("request \"", args.request_id, "\" is already expected on this daemon"));
  }
  KVT_RETURN_IF_ERROR(context_->book->Add(record));
  context_->metrics->TransferStarted(Side::kDecode);
  requests_[args.request_id] = std::move(request);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DecodeSide::Open(const OpenArgs& args, absl::Time wait_until) {
  std::shared_ptr<InboundRequest> request;
  uint64_t first = 0;
  {
    kvt::MutexLock lock(&mu_);
    auto expected = [this, &args]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return requests_.contains(args.request_id) || stopping_.load();
    };
    if (!mu_.AwaitWithDeadline(expected, wait_until) || stopping_) {
      return absl::DeadlineExceededError(absl::StrCat("no Expect for request \"", args.request_id,
                                                      "\" arrived on the decode daemon in time"));
    }
    request = requests_[args.request_id];
    const uint32_t layers = args.source_layout.num_layers;
    do {
      first = absl::Uniform<uint64_t>(random_, 1, uint64_t{1} << 62);
    } while (routes_.contains(first) || routes_.contains(first + layers - 1));
    KVT_RETURN_IF_ERROR(request->Accept(args, first));
    for (uint32_t l = 0; l < layers; ++l) routes_[first + l] = Route{request, l};
  }
  for (uint32_t l = 0; l < request->num_layers(); ++l) {
    // One link group per request: a prefill daemon that dies fails every layer, started or not.
    absl::Status s = context_->transport->Expect(first + l, request->Bounds(l), /*link_group=*/first);
    if (!s.ok()) {
      request->Fail(s, /*notify_peer=*/false);
      return s;
    }
  }
  return first;
}

absl::Status DecodeSide::Cancel(const std::string& request_id, const absl::Status& why, bool notify_peer) {
  std::shared_ptr<InboundRequest> request;
  {
    kvt::MutexLock lock(&mu_);
    auto it = requests_.find(request_id);
    if (it == requests_.end() || it->second->finished()) {
      return absl::NotFoundError(absl::StrCat("no live request \"", request_id, "\" on the decode side"));
    }
    request = it->second;
  }
  request->Fail(why, notify_peer);
  return absl::OkStatus();
}

void DecodeSide::Forget(const InboundRequest& request) {
  kvt::MutexLock lock(&mu_);
  auto it = requests_.find(request.id());
  if (it != requests_.end() && it->second.get() == &request) requests_.erase(it);
  if (request.first_transfer_id() != 0) {
    for (size_t l = 0; l < request.num_layers(); ++l) routes_.erase(request.first_transfer_id() + l);
  }
}

void DecodeSide::CheckDeadlines() {
  std::vector<std::shared_ptr<InboundRequest>> expired, orphaned;
  const absl::Time now = absl::Now();
  {
    kvt::MutexLock lock(&mu_);
    for (auto& [id, r] : requests_) {
      if (now >= r->deadline()) {
        expired.push_back(r);
      } else if (r->SourceDead()) {
        orphaned.push_back(r);
      }
    }
  }
  for (auto& r : expired) r->Expire();
  for (auto& r : orphaned) {
    r->Fail(absl::UnavailableError(absl::StrCat("the prefill daemon at ", r->source_address(),
                                                " stopped answering; its transfer cannot finish")),
            /*notify_peer=*/false);
  }
}

void DecodeSide::Pump() {
  absl::Time next_check = absl::Now();
  while (!stopping_) {
    absl::StatusOr<transport::InboundEvent> event = context_->transport->ReceiveAny(kPumpTick);
    if (event.ok()) {
      std::shared_ptr<InboundRequest> request;
      uint32_t layer = 0;
      {
        kvt::MutexLock lock(&mu_);
        auto it = routes_.find(event->transfer_id);
        if (it != routes_.end()) {
          request = it->second.request;
          layer = it->second.layer;
        }
      }
      if (request != nullptr) {
        if (!event->status.ok()) {
          request->Fail(absl::Status(event->status.code(),
                                     absl::StrFormat("layer %d: %s", layer, event->status.message())),
                        /*notify_peer=*/true);
        } else {
          context_->metrics->BytesReceived(event->chunk->header().stage == 0 ? Lane::kAnchor : Lane::kResidual,
                                           event->chunk->header().length);
          request->OnChunk(layer, *event->chunk);
        }
      }
    }
    if (absl::Now() >= next_check) {
      CheckDeadlines();
      next_check = absl::Now() + kPumpTick;
    }
  }
}

}  // namespace kvt::server
