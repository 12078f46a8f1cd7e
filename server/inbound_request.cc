#include "server/inbound_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/gpu_region_codec.h"

namespace kvt::server {
namespace {

uint32_t TotalHeads(const kv::KvLayoutSpec& s) { return s.total_kv_heads == 0 ? s.num_kv_heads : s.total_kv_heads; }

}  // namespace

InboundRequest::InboundRequest(DaemonContext* context, ExpectArgs args, RegionLease region,
                               std::shared_ptr<RequestRecord> record)
    : context_(context),
      args_(std::move(args)),
      record_(std::move(record)),
      deadline_(record_->events.start() + args_.deadline),
      region_(std::move(region)) {}

absl::Status InboundRequest::Accept(const OpenArgs& open, uint64_t first_transfer_id) {
  kvt::MutexLock lock(&mu_);
  if (opened_) return absl::AlreadyExistsError(absl::StrCat("request \"", args_.request_id, "\" was already opened"));
  if (!status_.ok()) return status_;
  if (!args_.source_daemon.empty() && open.source_daemon_id != args_.source_daemon) {
    return absl::PermissionDeniedError(absl::StrCat("request \"", args_.request_id, "\" expects source daemon \"",
                                                    args_.source_daemon, "\", not \"", open.source_daemon_id, "\""));
  }
  const kv::KvLayoutSpec& dst = region_->layout().spec();
  const kv::KvLayoutSpec& src = open.source_layout;
  if (open.num_tokens != args_.num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the source sends %d tokens, Expect asked for %d", open.num_tokens, args_.num_tokens));
  }
  if (src.num_layers != dst.num_layers || src.head_dim != dst.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layouts disagree: source has %d layers of head_dim %d, this region %d layers of head_dim %d",
                        src.num_layers, src.head_dim, dst.num_layers, dst.head_dim));
  }
  // Tensor parallelism M -> N: the request writes the heads both hold. A region wider than its source (N < M)
  // takes one request per source rank, each filling its part; a source that shares no head with the region is
  // a misconfiguration.
  if (TotalHeads(src) != TotalHeads(dst)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the source's model has %d KV heads, this region's %d: the layouts' total_kv_heads must agree",
        TotalHeads(src), TotalHeads(dst)));
  }
  if (dst.head_begin >= src.head_begin + src.num_kv_heads || src.head_begin >= dst.head_begin + dst.num_kv_heads) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "this region holds heads [%d, %d) of %d; the source sends heads [%d, %d) of %d, which must share some",
        dst.head_begin, dst.head_begin + dst.num_kv_heads, TotalHeads(dst), src.head_begin,
        src.head_begin + src.num_kv_heads, TotalHeads(src)));
  }
  // Bound the plan before building it: a page size the announcement does not bear out (page_tokens 1 of millions of
  // tokens) must not make this daemon allocate a page list the peer never sent. A plan has, per layer and kind,
  // one page per page_tokens and at most two tail pages.
  if (open.page_tokens < static_cast<uint32_t>(std::max(open.chunk_tokens, 1))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("page_tokens %d is below one %d-token chunk", open.page_tokens, open.chunk_tokens));
  }
  const uint64_t min_pages = uint64_t{2} * src.num_layers * (open.num_tokens / open.page_tokens);
  if (min_pages > open.pages.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the source announced %d pages, but %d layers of %d tokens in %d-token pages need at least %d",
                        open.pages.size(), src.num_layers, open.num_tokens, open.page_tokens, min_pages));
  }
  KVT_ASSIGN_OR_RETURN(kv::TransferPlan plan,
                       kv::MakeTransferPlan(open.scheme, open.chunk_tokens, src.num_layers, open.num_tokens,
                                        open.page_tokens, src.num_kv_heads * src.head_dim));
  if (plan.page_tokens != open.page_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat("page_tokens %d is not a whole number of %d-token chunks",
                                                      open.page_tokens, open.chunk_tokens));
  }
  size_t n = 0;
  for (const auto& layer : plan.layers) {
    for (const kv::PlannedPage& expected : layer) {
      if (n >= open.pages.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("the source announced %d pages, the plan has more", open.pages.size()));
      }
      const kv::PlannedPage& got = open.pages[n++];
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
  if (region_->on_gpu()) KVT_RETURN_IF_ERROR(CheckGpuPlan(region_->layout(), plan));
  RegionCodecOptions codec_options;
  codec_options.workers = context_->workers;
  codec_options.buffers = context_->buffers;
  codec_options.source_head_begin = src.head_begin;
  codec_options.source_heads = src.num_kv_heads;
  std::unique_ptr<RegionCodec> codec = MakeRegionCodec(*region_, codec_options);
  planned_ = std::move(plan.layers);
  std::vector<LayerState> layers(planned_.size());
  for (size_t l = 0; l < planned_.size(); ++l) {
    for (const kv::PlannedPage& p : planned_[l]) {
      PageState state;
      state.plan = &p;
      layers[l].pages.push_back(state);
    }
  }
  scheme_ = open.scheme;
  max_batch_ = codec->max_decode_batch();
  codec_ = std::move(codec);
  source_address_ = open.source_address;
  first_transfer_id_ = first_transfer_id;
  layers_ = std::move(layers);
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

absl::Status InboundRequest::ExpectLayers(uint64_t link_group) {
  // Every layer's inbox first, without any lock held (a cold pool allocates and pins): the data plane needs each
  // stream's destination before its first chunk. With a warm pool these are buffers kept from earlier requests
  // (docs/DAEMON.md, "Buffers").
  std::vector<std::shared_ptr<LayerInbox>> inboxes;
  for (const std::vector<kv::PlannedPage>& pages : planned_) {
    KVT_ASSIGN_OR_RETURN(std::shared_ptr<LayerInbox> inbox,
                         LayerInbox::Create(pages, *context_->buffers, codec_->inbox_memory()));
    inboxes.push_back(std::move(inbox));
  }
  // Under the lock, so that a failure meanwhile (which cancels the layers' transfers) cannot miss a transfer
  // announced after it: the order is request, then the data plane's table, never the reverse.
  kvt::MutexLock lock(&mu_);
  if (finished_ || !status_.ok()) {
    return status_.ok() ? absl::CancelledError(absl::StrCat("request ", args_.request_id, " ended while opening"))
                        : status_;
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l].inbox = inboxes[l];
    KVT_RETURN_IF_ERROR(
        context_->transport->Expect(first_transfer_id_ + l, inboxes[l]->Bounds(), link_group, inboxes[l]));
  }
  return absl::OkStatus();
}

WorkerPool* InboundRequest::DecodeWorkers() const { return CodecWorkers(*context_, codec_->on_device()); }

void InboundRequest::OnChunk(uint32_t layer, const transport::ReceivedChunk& chunk) {
  const transport::ChunkHeader& h = chunk.header();
  const absl::Time now = absl::Now();
  RecordStage(*context_, *record_, h.stage == 0 ? Stage::kArriveAnchor : Stage::kArriveResidual, now, now, h.length,
              /*metrics=*/false);
  if (!chunk.stream_complete()) return;  // the bytes are in the inbox already; nothing to decode yet
  std::function<void()> task;
  TaskPriority priority = TaskPriority::kHigh;
  {
    kvt::MutexLock lock(&mu_);
    if (!status_.ok() || finished_) return;
    LayerState& ls = layers_[layer];
    PageState& page = ls.pages[h.page];
    page.streams_complete |= 1u << h.stage;
    int available = 0;
    while (available < static_cast<int>(page.plan->stream_bytes.size()) && (page.streams_complete >> available & 1u)) {
      ++available;
    }
    if (available > page.stages_available) page.decodable_since = now;
    page.stages_available = available;
    if (page.stages_available <= page.stages_decoded) return;
    std::shared_ptr<InboundRequest> self = shared_from_this();
    priority = page.stages_decoded == 0 ? TaskPriority::kHigh : TaskPriority::kLow;
    if (max_batch_ == 1) {
      if (page.decode_scheduled) return;
      page.decode_scheduled = true;
      task = [self, layer, p = h.page] { self->DecodePageTask(layer, p); };
    } else {
      const uint32_t kind = page.plan->spec.kind;
      // One drain at a time per layer and kind, plus a high-priority one when a first decode lands behind a
      // low-priority drain still queued (that one would make it wait behind every other high task).
      const bool needed = ls.drains[kind] == 0 || (priority == TaskPriority::kHigh && !ls.high_drain_queued[kind]);
      if (!needed) return;
      ++ls.drains[kind];
      if (priority == TaskPriority::kHigh) ls.high_drain_queued[kind] = true;
      task = [self, layer, kind, priority] { self->DrainTask(layer, kind, priority); };
    }
    ++active_tasks_;
  }
  DecodeWorkers()->Submit(std::move(task), priority);
}

void InboundRequest::DecodePageTask(uint32_t layer, uint32_t page_index) {
  int stages = 0;
  bool publish = false;
  absl::Span<const uint8_t> container;
  std::shared_ptr<LayerInbox> inbox;  // kept while the decode reads it
  kv::PageSpec spec;
  bool full = false;
  absl::Time decodable_since;
  {
    kvt::MutexLock lock(&mu_);
    PageState& page = layers_[layer].pages[page_index];
    if (finished_ || !status_.ok() || page.stages_available <= page.stages_decoded) {
      page.decode_scheduled = false;
      publish = TaskEndedLocked();
    } else {
      stages = page.stages_available;
      inbox = layers_[layer].inbox;
      container = inbox->container(page_index);
      spec = page.plan->spec;
      full = stages == static_cast<int>(page.plan->stream_bytes.size());
      decodable_since = page.decodable_since;
    }
  }
  if (stages == 0) {
    if (publish) PublishEnd();
    return;
  }
  const absl::Time start = absl::Now();
  // The data plane writes only streams >= `stages` of this container meanwhile; these bytes are stable.
  const absl::Status s = codec_->DecodePages(args_.block_ids, {spec}, {container}, stages, /*urgent=*/true);
  const absl::Time end = absl::Now();
  context_->metrics->DecodeLatency(end - start);
  RecordStage(*context_, *record_, Stage::kDecodeQueue, decodable_since, start);
  RecordStage(*context_, *record_, full ? Stage::kDecodeFull : Stage::kDecodeAnchor, start, end, container.size());
  if (!s.ok()) {
    // Fail first, while this task still counts: the failure is published when it ends, below.
    Fail(absl::Status(s.code(), absl::StrFormat("layer %d page %d: %s", layer, page_index, s.message())),
         /*notify_peer=*/true);
    {
      kvt::MutexLock lock(&mu_);
      layers_[layer].pages[page_index].decode_scheduled = false;
      publish = TaskEndedLocked();
    }
    if (publish) PublishEnd();
    return;
  }
  bool done = false;
  bool again = false;
  {
    kvt::MutexLock lock(&mu_);
    done = PageDecodedLocked(layer, page_index, stages);
    PageState& page = layers_[layer].pages[page_index];
    // More landed meanwhile (the residual): decode it as a task of its own, queued behind anchors.
    again = !done && !finished_ && status_.ok() && page.stages_available > page.stages_decoded;
    // Deciding to end and clearing the flag in one critical section: a stream that lands in between would
    // otherwise see the flag still set, schedule nothing, and never be decoded.
    if (!again) {
      page.decode_scheduled = false;
      publish = TaskEndedLocked();
    }
  }
  if (done) Finish(absl::OkStatus());  // publishes now if no other decode runs, else when the last one ends
  if (publish) PublishEnd();
  if (again) {
    std::shared_ptr<InboundRequest> self = shared_from_this();
    DecodeWorkers()->Submit([self, layer, page_index] { self->DecodePageTask(layer, page_index); }, TaskPriority::kLow);
  }
}

void InboundRequest::DrainTask(uint32_t layer, uint32_t kind, TaskPriority queued_as) {
  std::vector<uint32_t> batch;
  std::vector<kv::PageSpec> specs;
  std::vector<absl::Span<const uint8_t>> containers;
  std::shared_ptr<LayerInbox> inbox;
  int stages = 0;
  bool fresh = false;
  bool publish = false;
  absl::Time oldest = absl::InfiniteFuture();
  uint64_t bytes = 0;
  {
    kvt::MutexLock lock(&mu_);
    LayerState& ls = layers_[layer];
    if (queued_as == TaskPriority::kHigh) ls.high_drain_queued[kind] = false;  // started: no longer queued
    if (!finished_ && status_.ok()) {
      // Pages still without their anchor go first: they are what the engine waits on.
      fresh = std::any_of(ls.pages.begin(), ls.pages.end(), [kind](const PageState& page) {
        return page.plan->spec.kind == kind && !page.decode_scheduled && page.stages_decoded == 0 &&
               page.stages_available > 0;
      });
      inbox = ls.inbox;
      for (uint32_t i = 0; i < ls.pages.size() && batch.size() < max_batch_; ++i) {
        PageState& page = ls.pages[i];
        if (page.plan->spec.kind != kind || page.decode_scheduled || page.stages_available <= page.stages_decoded ||
            (page.stages_decoded == 0) != fresh) {
          continue;
        }
        if (stages == 0) stages = page.stages_available;
        // One page length a launch (a request's last page may be shorter) and one stage count.
        if (page.stages_available != stages || (!specs.empty() && page.plan->spec.tokens != specs[0].tokens)) continue;
        page.decode_scheduled = true;
        oldest = std::min(oldest, page.decodable_since);
        batch.push_back(i);
        specs.push_back(page.plan->spec);
        containers.push_back(inbox->container(i));
        bytes += containers.back().size();
      }
    }
    if (batch.empty()) {
      --ls.drains[kind];
      publish = TaskEndedLocked();
    }
  }
  if (batch.empty()) {
    if (publish) PublishEnd();
    return;
  }
  const bool full = stages == scheme_.num_streams();
  const absl::Time start = absl::Now();
  // The data plane writes only streams >= `stages` of these containers meanwhile; these bytes are stable.
  const absl::Status s = codec_->DecodePages(args_.block_ids, specs, containers, stages, /*urgent=*/fresh);
  const absl::Time end = absl::Now();
  RecordStage(*context_, *record_, Stage::kDecodeQueue, oldest, start);
  RecordStage(*context_, *record_, full ? Stage::kDecodeFull : Stage::kDecodeAnchor, start, end, bytes);
  if (s.ok()) {
    const absl::Duration per_page = (end - start) / static_cast<int64_t>(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) context_->metrics->DecodeLatency(per_page);
  } else {
    // Fail first, while this task still counts: the failure is published when it ends, below. The codec numbers
    // the batch's containers from 0; the pages it names are these, in order.
    Fail(absl::Status(s.code(), absl::StrFormat("layer %d kind %d, a batch of pages [%s]: %s", layer, kind,
                                                absl::StrJoin(batch, ","), s.message())),
         /*notify_peer=*/true);
  }
  bool done = false;
  bool more = false;
  TaskPriority priority = TaskPriority::kLow;
  {
    kvt::MutexLock lock(&mu_);
    LayerState& ls = layers_[layer];
    for (uint32_t i : batch) {
      ls.pages[i].decode_scheduled = false;
      if (s.ok()) done = PageDecodedLocked(layer, i, stages) || done;
    }
    if (s.ok() && !done && !finished_ && status_.ok()) {
      for (const PageState& page : ls.pages) {
        if (page.plan->spec.kind != kind || page.decode_scheduled || page.stages_available <= page.stages_decoded) {
          continue;
        }
        more = true;
        if (page.stages_decoded == 0) priority = TaskPriority::kHigh;
      }
    }
    if (more && priority == TaskPriority::kHigh && ls.high_drain_queued[kind]) more = false;  // one is queued
    if (more) {
      if (priority == TaskPriority::kHigh) ls.high_drain_queued[kind] = true;
    } else {
      --ls.drains[kind];
      publish = TaskEndedLocked();
    }
  }
  if (done) Finish(absl::OkStatus());
  if (more) {
    // The next batch as a task of its own, so that its priority (first decodes first) is decided again.
    std::shared_ptr<InboundRequest> self = shared_from_this();
    DecodeWorkers()->Submit([self, layer, kind, priority] { self->DrainTask(layer, kind, priority); }, priority);
  } else if (publish) {
    PublishEnd();
  }
}

bool InboundRequest::PageDecodedLocked(uint32_t layer, uint32_t page_index, int stages) {
  LayerState& ls = layers_[layer];
  PageState& page = ls.pages[page_index];
  const int full = static_cast<int>(page.plan->stream_bytes.size());
  bool done = false;
  if (page.stages_decoded == 0 && ++ls.pages_anchor == ls.pages.size()) {
    record_->events.Add(EventKind::kAnchorReady, layer);
    if (record_->layers_anchor_ready.fetch_add(1) + 1 == layers_.size()) {
      context_->metrics->AnchorLatency(absl::Now() - opened_at_);
    }
  }
  page.stages_decoded = stages;
  if (stages == full && ++ls.pages_full == ls.pages.size()) {
    ls.inbox.reset();  // back to the pool once the data plane and running decodes let go
    record_->events.Add(EventKind::kFullReady, layer);
    if (record_->layers_full_ready.fetch_add(1) + 1 == layers_.size()) {
      context_->metrics->FullLatency(absl::Now() - opened_at_);
      done = true;
    }
  }
  return done;
}

bool InboundRequest::TaskEndedLocked() {
  --active_tasks_;
  if (!finished_ || active_tasks_ > 0 || published_) return false;
  region_ = RegionLease();
  published_ = true;
  return true;
}

void InboundRequest::Fail(const absl::Status& status, bool notify_peer) {
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

void InboundRequest::Expire() {
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
    StopTransfers(source_address(), absl::CancelledError("the decode side finished at anchor precision"), layers);
    Finish(absl::OkStatus());
    return;
  }
  Fail(absl::DeadlineExceededError(absl::StrFormat(
           "request %s: not complete within its %s deadline (%d of %d layers at full precision)", args_.request_id,
           absl::FormatDuration(args_.deadline), record_->layers_full_ready.load(), record_->num_layers.load())),
       /*notify_peer=*/true);
}

bool InboundRequest::finished() const {
  kvt::MutexLock lock(&mu_);
  return finished_;
}

bool InboundRequest::SourceDead() const {
  kvt::MutexLock lock(&mu_);
  return watching_source_ && !finished_ && context_->liveness->Dead(source_address_);
}

std::string InboundRequest::source_address() const {
  kvt::MutexLock lock(&mu_);
  return source_address_;
}

// The peer goes first: once the transfers are cancelled here, its chunks are rejected (NOT_FOUND), and it should
// hear the real reason from us rather than that rejection. On the worker pool, so that a slow or dead peer never
// blocks the pump.
void InboundRequest::StopTransfers(std::string peer, absl::Status why, size_t layers) {
  std::shared_ptr<InboundRequest> self = shared_from_this();
  context_->workers->Submit([self, peer = std::move(peer), why = std::move(why), layers] {
    if (!peer.empty()) self->context_->peers->CancelOnPeer(peer, self->args_.request_id, why);
    for (size_t l = 0; l < layers; ++l) self->context_->transport->Cancel(self->first_transfer_id_ + l);
  });
}

void InboundRequest::Finish(const absl::Status& status) {
  bool publish = false;
  {
    kvt::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    if (status_.ok()) status_ = status;
    // The inboxes go back to the pool as soon as running decodes and the data plane's pending reads let go.
    for (LayerState& l : layers_) l.inbox.reset();
    if (watching_source_) context_->liveness->Unwatch(source_address_);
    watching_source_ = false;
    // Running decodes finish their pages first; the last one publishes the end and lets the region go.
    if (active_tasks_ == 0 && !published_) {
      region_ = RegionLease();
      published_ = true;
      publish = true;
    }
  }
  if (publish) PublishEnd();
}

void InboundRequest::PublishEnd() {
  absl::Status status;
  {
    kvt::MutexLock lock(&mu_);
    status = status_;
  }
  FinishRecord(*context_, *record_, status);
  if (on_finished) on_finished(*this);
}

}  // namespace kvt::server
