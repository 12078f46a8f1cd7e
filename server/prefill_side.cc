#include "server/prefill_side.h"

#include <pthread.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "codec/container.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kv/layout_proto.h"
#include "kv/transfer_plan.h"
#include "proto/kvt/v1/peer.grpc.pb.h"
#include "server/encoded_layer.h"
#include "server/gpu_region_codec.h"
#include "server/proto_convert.h"
#include "server/region_codec.h"

namespace kvt::server {
namespace {

// Layers of one request encoding at once on a GPU: enough that the encoder runs ahead of a fast link (one layer at
// a time left the GPU path encode-bound at ~7 GB/s on an H200; four at once encoded 602 MB in 54 ms instead of
// 84-99, but their burst of codec work coincided with lynx's anchors losing ~30 ms against their link time at
// 10 Gbit/s; docs/BENCHMARKS.md, "Line rate"), few enough that concurrent requests share the GPU slots.
constexpr size_t kEncodeAheadOnDevice = 2;
// In host memory a layer's pages encode in parallel on the codec threads, one page a thread; two layers of 16
// pages left 32 of 64 threads idle and the host path encode-bound at ~3.3 GB/s (docs/BENCHMARKS.md, "Line rate").
// So enough layers that their pages cover the codec threads, within these bounds (and the request's staging bytes).
constexpr size_t kEncodeAheadInHostMin = 2;
constexpr size_t kEncodeAheadInHostMax = 8;

absl::Status CheckReadyLayers(const std::vector<uint32_t>& ready_layers, uint32_t num_layers) {
  for (uint32_t l : ready_layers) {
    if (l >= num_layers) {
      return absl::InvalidArgumentError(
          absl::StrFormat("ready layer %d >= the region's num_layers %d", l, num_layers));
    }
  }
  return absl::OkStatus();
}

}  // namespace

class PrefillSide::OutboundRequest {
 public:
  OutboundRequest(DaemonContext* context, OfferArgs args, RegionLease region, kv::TransferPlan plan,
                  std::shared_ptr<RequestRecord> record)
      : context_(context),
        args_(std::move(args)),
        region_(std::move(region)),
        plan_(std::move(plan)),
        record_(std::move(record)),
        deadline_(record_->events.start() + args_.deadline),
        offered_(plan_.layers.size(), false) {
    RegionCodecOptions codec_options;
    codec_options.workers = context_->workers;
    codec_options.buffers = context_->buffers;
    codec_ = MakeRegionCodec(*region_, codec_options);
    AddReadyLayers(args_.ready_layers);
  }

  ~OutboundRequest() {
    if (thread_.joinable()) thread_.join();
  }

  void Start() {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "kvt-offer");  // top -H, perf, /proc and kvtctl demo's busiest threads
      Run();
    });
  }

  // Checks that a later Offer describes the same request, then queues its new layers.
  absl::Status AddLayers(const OfferArgs& args) {
    if (args.region_id != args_.region_id || args.block_ids != args_.block_ids ||
        args.num_tokens != args_.num_tokens || !(args.scheme == args_.scheme) ||
        args.decode_daemon != args_.decode_daemon) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a later Offer of request \"", args.request_id,
          "\" must repeat the first one's region, blocks, num_tokens, scheme and decode_daemon; only ready_layers "
          "may change"));
    }
    KVT_RETURN_IF_ERROR(CheckReadyLayers(args.ready_layers, static_cast<uint32_t>(plan_.layers.size())));
    AddReadyLayers(args.ready_layers);
    return absl::OkStatus();
  }

  void Cancel(const absl::Status& why, bool notify_peer) {
    std::vector<uint64_t> sent;
    {
      kvt::MutexLock lock(&mu_);
      if (!stop_.ok()) return;
      stop_ = why;
      notify_peer_on_stop_ = notify_peer;
      sent = sent_ids_;
    }
    // Handles of sent layers finish CANCELLED, which wakes the thread if it waits on one.
    for (uint64_t id : sent) context_->transport->Cancel(id);
  }

  bool ended() const {
    kvt::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  struct LayerInFlight {
    uint32_t layer = 0;
    uint64_t transfer_id = 0;
    uint64_t bytes = 0;
    EncodedLayer pages;  // the bytes the transport reads until `handle` is done
    std::shared_ptr<transport::SendHandle> handle;
    absl::Time sent_at;  // when Send queued it
  };

  void AddReadyLayers(const std::vector<uint32_t>& layers) {
    kvt::MutexLock lock(&mu_);
    for (uint32_t l : layers) {
      if (!offered_[l]) {
        offered_[l] = true;
        ready_.push_back(l);
      }
    }
  }

  void Run() {
    absl::Status status = Transfer();
    bool notify_peer = true;
    {
      kvt::MutexLock lock(&mu_);
      if (!stop_.ok()) {  // cancelled from outside: that is the outcome, whatever the transfer saw
        status = stop_;
        notify_peer = notify_peer_on_stop_;
      }
    }
    if (!status.ok()) {
      for (uint64_t id : SentIds()) context_->transport->Cancel(id);
      if (notify_peer && first_transfer_id_ != 0) {
        context_->peers->CancelOnPeer(args_.decode_daemon, args_.request_id, status);
      }
    }
    Finish(status);
  }

  void Finish(const absl::Status& status) {
    codec_.reset();
    region_ = RegionLease();  // the region may be unregistered from now on
    FinishRecord(*context_, *record_, status);
    kvt::MutexLock lock(&mu_);
    ended_ = true;
  }

  std::vector<uint64_t> SentIds() {
    kvt::MutexLock lock(&mu_);
    return sent_ids_;
  }

  absl::Status Stopped() {
    kvt::MutexLock lock(&mu_);
    return stop_;
  }

  // The next layer offered and not yet sent, waiting for one up to the deadline.
  absl::StatusOr<uint32_t> NextLayer() {
    kvt::MutexLock lock(&mu_);
    auto news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !ready_.empty() || !stop_.ok(); };
    if (!mu_.AwaitWithDeadline(news, deadline_)) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "request %s: layer(s) still not offered when its %s deadline passed", args_.request_id,
          absl::FormatDuration(args_.deadline)));
    }
    if (!stop_.ok()) return stop_;
    const uint32_t layer = ready_.front();
    ready_.pop_front();
    return layer;
  }

  absl::Status Open(const PeerConnection& peer) {
    v1::OpenTransferRequest open;
    open.set_request_id(args_.request_id);
    open.mutable_scheme()->set_name(args_.scheme.Name());
    *open.mutable_source_layout() = kv::LayoutToProto(region_->layout().spec());
    open.set_num_tokens(args_.num_tokens);
    open.set_page_tokens(plan_.page_tokens);
    open.set_chunk_tokens(plan_.chunk_tokens);
    open.set_source_daemon_id(context_->peers->self().daemon_id);
    open.set_source_address(context_->advertise_address);
    const absl::Duration left = deadline_ - absl::Now();
    open.set_deadline_ms(static_cast<uint32_t>(
        std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 1, 3600000)));
    for (const auto& layer : plan_.layers) {
      for (const kv::PlannedPage& page : layer) {
        v1::PageSpan* span = open.add_pages();
        span->set_layer(page.spec.layer);
        span->set_kind(page.spec.kind);
        span->set_first_token(page.spec.first_token);
        span->set_tokens(page.spec.tokens);
        for (uint64_t b : page.stream_bytes) span->add_stream_bytes(b);
      }
    }
    v1::OpenTransferResponse response;
    grpc::ClientContext call;
    context_->peers->PrepareCall(&call, deadline_);
    const grpc::Status rpc = peer.stub->OpenTransfer(&call, open, &response);
    if (!rpc.ok()) {
      const absl::Status s = FromGrpcStatus(rpc);
      if (s.code() == absl::StatusCode::kUnavailable) context_->peers->Forget(args_.decode_daemon);
      return absl::Status(s.code(), absl::StrCat("OpenTransfer on ", args_.decode_daemon, ": ", s.message()));
    }
    if (response.first_transfer_id() == 0) {
      return absl::InternalError(absl::StrCat("decode daemon ", args_.decode_daemon, " returned transfer id 0"));
    }
    first_transfer_id_ = response.first_transfer_id();
    return absl::OkStatus();
  }

  // One layer being encoded on the worker pool while the request's thread sends earlier ones.
  struct EncodeJob {
    uint32_t layer = 0;
    absl::Time start, end;
    absl::StatusOr<EncodedLayer> result = absl::UnknownError("not encoded yet");
    kvt::Notification done;
  };

  // Layers to keep encoding at once: kEncodeAheadOnDevice on a GPU; in host memory, enough that their pages
  // cover the codec threads (one page a thread), within kEncodeAheadInHostMin..Max.
  size_t EncodeAhead() const {
    if (codec_->on_device()) return kEncodeAheadOnDevice;
    const size_t pages = std::max<size_t>(1, plan_.layers.empty() ? 1 : plan_.layers[0].size());
    const size_t threads = static_cast<size_t>(CodecWorkers(*context_, false)->size());
    return std::clamp(threads / pages, kEncodeAheadInHostMin, kEncodeAheadInHostMax);
  }

  // Starts encoding `layer` through the region's codec (the CUDA kernels for GPU regions, the CPU codec on the
  // worker pool otherwise) into one pooled buffer the transport sends from.
  std::shared_ptr<EncodeJob> StartEncode(uint32_t layer) {
    auto job = std::make_shared<EncodeJob>();
    job->layer = layer;
    // A GPU encode holds a slot while it runs (and may wait for one): on the device workers, never a codec thread.
    CodecWorkers(*context_, codec_->on_device())->Submit([this, job] {
      const std::vector<kv::PlannedPage>& planned = plan_.layers[job->layer];
      job->start = absl::Now();
      job->result = codec_->EncodeLayer(args_.block_ids, planned, args_.scheme, plan_.chunk_tokens);
      job->end = absl::Now();
      context_->metrics->EncodeLatency((job->end - job->start) / std::max<size_t>(1, planned.size()));
      job->done.Notify();
    });
    return job;
  }

  // The next offered layer if one is ready now; nullopt if none is (or the request was stopped: the caller's next
  // blocking NextLayer says so).
  std::optional<uint32_t> TryNextLayer() {
    kvt::MutexLock lock(&mu_);
    if (ready_.empty() || !stop_.ok()) return std::nullopt;
    const uint32_t layer = ready_.front();
    ready_.pop_front();
    return layer;
  }

  // Waits for the oldest layer in flight to be acknowledged. `staging_full`: the wait is for room in the staging
  // bytes (profiled as such), not the request's end.
  absl::Status WaitOldest(std::deque<LayerInFlight>& window, uint64_t* staged, bool staging_full) {
    LayerInFlight& oldest = window.front();
    const absl::Time wait_start = absl::Now();
    if (!oldest.handle->WaitFor(deadline_ - wait_start)) {
      return absl::DeadlineExceededError(absl::StrFormat("request %s: deadline of %s passed with layer %d on the wire",
                                                         args_.request_id, absl::FormatDuration(args_.deadline),
                                                         oldest.layer));
    }
    const absl::Status s = oldest.handle->status();
    if (!s.ok()) {
      if (s.code() == absl::StatusCode::kUnavailable) context_->peers->Forget(args_.decode_daemon);
      return absl::Status(s.code(), absl::StrFormat("layer %d: %s", oldest.layer, s.message()));
    }
    const absl::Time done = oldest.handle->finished_at();
    RecordStage(*context_, *record_, Stage::kSend, oldest.sent_at, done, oldest.bytes);
    if (staging_full) RecordStage(*context_, *record_, Stage::kStagingWait, wait_start, std::max(wait_start, done));
    record_->events.Add(EventKind::kFullReady, oldest.layer);
    record_->layers_full_ready.fetch_add(1);
    *staged -= oldest.bytes;
    window.pop_front();
    return absl::OkStatus();
  }

  absl::Status Transfer() {
    const absl::Duration connect = std::min(context_->options->peer_connect_timeout, deadline_ - absl::Now());
    KVT_ASSIGN_OR_RETURN(std::shared_ptr<const PeerConnection> peer,
                         context_->peers->Dial(args_.decode_daemon, connect));
    KVT_RETURN_IF_ERROR(Open(*peer));
    std::deque<LayerInFlight> window;
    std::deque<std::shared_ptr<EncodeJob>> encoding;
    // On an early return (a failure or a stop): encodes still running use this request's codec and region, so wait
    // for them; layers still in the window may still be read by the transport, and their pooled buffers go back
    // when the layer is destroyed, so cancel them and wait until the transport has let go of their bytes (Wait is
    // bounded by the link's failure detection).
    absl::Cleanup release = [&] {
      for (const auto& job : encoding) job->done.WaitForNotification();
      for (const LayerInFlight& f : window) context_->transport->Cancel(f.transfer_id);
      for (const LayerInFlight& f : window) f.handle->Wait().IgnoreError();
    };
    const uint64_t staging_limit = static_cast<uint64_t>(context_->options->staging_bytes_per_request);
    uint64_t staged = 0;   // bytes of layers sent and not yet acknowledged
    uint64_t encoded = 0;  // bytes of layers being encoded (their planned size)
    size_t started = 0;
    const size_t encode_ahead = EncodeAhead();
    for (size_t sent = 0; sent < plan_.layers.size(); ++sent) {
      // Keep up to encode_ahead layers encoding (one GPU slot or a share of the codec threads each), so the encoder
      // runs ahead of the wire instead of one layer at a time behind it (docs/DAEMON.md, "Encode ahead"), within
      // the request's staging bytes.
      // (Layers of a plan all have the same size: LayerBytes(0) is the next one's.)
      while (started < plan_.layers.size() && encoding.size() < encode_ahead &&
             (encoding.empty() || staged + encoded + LayerBytes(0) <= staging_limit)) {
        std::optional<uint32_t> layer;
        if (encoding.empty()) {
          KVT_ASSIGN_OR_RETURN(layer, NextLayer());  // nothing to send meanwhile: wait for an offer
        } else {
          layer = TryNextLayer();
          if (!layer.has_value()) break;
        }
        encoding.push_back(StartEncode(*layer));
        encoded += LayerBytes(*layer);
        ++started;
      }
      std::shared_ptr<EncodeJob> job = encoding.front();
      if (!job->done.WaitForNotificationWithTimeout(deadline_ - absl::Now())) {
        return absl::DeadlineExceededError(
            absl::StrFormat("request %s: deadline of %s passed while layer %d was being encoded", args_.request_id,
                            absl::FormatDuration(args_.deadline), job->layer));
      }
      encoding.pop_front();
      encoded -= LayerBytes(job->layer);
      KVT_RETURN_IF_ERROR(job->result.status());
      LayerInFlight flight;
      flight.layer = job->layer;
      flight.transfer_id = first_transfer_id_ + job->layer;
      flight.pages = *std::move(job->result);
      std::vector<transport::OutboundStream> streams;
      uint64_t anchor_bytes = 0;
      for (size_t i = 0; i < flight.pages.num_pages(); ++i) {
        const absl::Span<const absl::Span<const uint8_t>> page = flight.pages.streams(i);
        for (size_t s = 0; s < page.size(); ++s) {
          streams.push_back({static_cast<uint32_t>(i), static_cast<uint8_t>(s), page[s]});
          (s == 0 ? anchor_bytes : flight.bytes) += page[s].size();
        }
      }
      flight.bytes += anchor_bytes;
      {
        kvt::MutexLock lock(&mu_);
        if (!stop_.ok()) return stop_;
        sent_ids_.push_back(flight.transfer_id);
      }
      absl::StatusOr<std::shared_ptr<transport::SendHandle>> handle =
          context_->transport->Send(peer->data_peer, flight.transfer_id, std::move(streams));
      if (!handle.ok()) {
        if (handle.status().code() == absl::StatusCode::kUnavailable) context_->peers->Forget(args_.decode_daemon);
        return handle.status();
      }
      flight.handle = *std::move(handle);
      flight.sent_at = absl::Now();
      RecordStage(*context_, *record_, Stage::kEncode, job->start, job->end, flight.bytes);
      context_->metrics->BytesSent(Lane::kAnchor, anchor_bytes);
      context_->metrics->BytesSent(Lane::kResidual, flight.bytes - anchor_bytes);
      staged += flight.bytes;
      window.push_back(std::move(flight));
      while (staged + encoded > staging_limit && window.size() > 1) {
        KVT_RETURN_IF_ERROR(WaitOldest(window, &staged, /*staging_full=*/true));
      }
    }
    while (!window.empty()) KVT_RETURN_IF_ERROR(WaitOldest(window, &staged, /*staging_full=*/false));
    return absl::OkStatus();
  }

  // The planned wire bytes of `layer`.
  uint64_t LayerBytes(uint32_t layer) const {
    uint64_t bytes = 0;
    for (const kv::PlannedPage& p : plan_.layers[layer]) bytes += p.total_bytes();
    return bytes;
  }

  DaemonContext* const context_;
  const OfferArgs args_;
  RegionLease region_;
  const kv::TransferPlan plan_;
  const std::shared_ptr<RequestRecord> record_;
  const absl::Time deadline_;
  std::unique_ptr<RegionCodec> codec_;  // the region's (host or CUDA); used on the request's thread
  uint64_t first_transfer_id_ = 0;  // set by Open, on the request's thread

  mutable kvt::Mutex mu_;
  std::vector<bool> offered_ ABSL_GUARDED_BY(mu_);
  std::deque<uint32_t> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> sent_ids_ ABSL_GUARDED_BY(mu_);
  absl::Status stop_ ABSL_GUARDED_BY(mu_);
  bool notify_peer_on_stop_ ABSL_GUARDED_BY(mu_) = true;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

PrefillSide::PrefillSide(DaemonContext* context) : context_(context) {}

PrefillSide::~PrefillSide() {
  absl::flat_hash_map<std::string, std::shared_ptr<OutboundRequest>> requests;
  {
    kvt::MutexLock lock(&mu_);
    requests.swap(requests_);
  }
  for (auto& [id, request] : requests) {
    request->Cancel(absl::CancelledError("the daemon is shutting down"), /*notify_peer=*/true);
  }
  requests.clear();  // joins each thread
}

void PrefillSide::ReapLocked() {
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second->ended()) {
      requests_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::Status PrefillSide::Offer(const OfferArgs& args) {
  kvt::MutexLock lock(&mu_);
  ReapLocked();
  auto live = requests_.find(args.request_id);
  if (live != requests_.end()) {
    return live->second->AddLayers(args);
  }
  KVT_ASSIGN_OR_RETURN(RegionLease region, context_->regions->Acquire(args.region_id));
  const kv::KvLayout& layout = region->layout();
  KVT_RETURN_IF_ERROR(kv::CheckRequestBlocks(layout, args.block_ids, args.num_tokens));
  KVT_RETURN_IF_ERROR(CheckReadyLayers(args.ready_layers, layout.spec().num_layers));
  // GPU regions read and write whole blocks: their plans' chunks are block multiples (GpuPlanChunkTokens).
  const int chunk_tokens = region->on_gpu() ? GpuPlanChunkTokens(args.scheme, context_->options->chunk_tokens,
                                                                  layout.spec().block_tokens)
                                            : context_->options->chunk_tokens;
  KVT_ASSIGN_OR_RETURN(kv::TransferPlan plan,
                       kv::MakeTransferPlan(args.scheme, chunk_tokens, layout.spec().num_layers, args.num_tokens,
                                            context_->options->page_tokens,
                                            layout.spec().num_kv_heads * layout.spec().head_dim));
  if (region->on_gpu()) KVT_RETURN_IF_ERROR(CheckGpuPlan(layout, plan));
  auto record = std::make_shared<RequestRecord>(args.request_id, Side::kPrefill, absl::Now());
  record->SetLabels(args.scheme.Name(), args.decode_daemon);
  record->num_layers = layout.spec().num_layers;
  auto request = std::make_shared<OutboundRequest>(context_, args, std::move(region), std::move(plan), record);
  std::weak_ptr<OutboundRequest> weak = request;
  record->cancel = [weak](const absl::Status& why, bool notify_peer) {
    if (auto r = weak.lock()) r->Cancel(why, notify_peer);
  };
  KVT_RETURN_IF_ERROR(context_->book->Add(record));
  context_->metrics->TransferStarted(Side::kPrefill);
  requests_.emplace(args.request_id, request);
  request->Start();
  return absl::OkStatus();
}

absl::Status PrefillSide::Cancel(const std::string& request_id, const absl::Status& why, bool notify_peer) {
  std::shared_ptr<OutboundRequest> request;
  {
    kvt::MutexLock lock(&mu_);
    auto it = requests_.find(request_id);
    if (it == requests_.end() || it->second->ended()) {
      return absl::NotFoundError(absl::StrCat("no live request \"", request_id, "\" on the prefill side"));
    }
    request = it->second;
  }
  request->Cancel(why, notify_peer);
  return absl::OkStatus();
}

}  // namespace kvt::server
