#include "server/decode_side.h"

#include <pthread.h>

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kvt::server {
namespace {

constexpr absl::Duration kPumpTick = absl::Milliseconds(20);

}  // namespace

DecodeSide::DecodeSide(DaemonContext* context) : context_(context) {
  {
    kvt::MutexLock lock(&alive_->mu);
    alive_->side = this;
  }
  pump_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "kvt-pump");  // top -H, perf, /proc and kvtctl demo's busiest threads
    Pump();
  });
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
  kvt::MutexLock lock(&alive_->mu);
  alive_->side = nullptr;
}

absl::Status DecodeSide::Expect(const ExpectArgs& args) {
  KVT_ASSIGN_OR_RETURN(RegionLease region, context_->regions->Acquire(args.region_id));
  KVT_RETURN_IF_ERROR(kv::CheckRequestBlocks(region->layout(), args.block_ids, args.num_tokens));
  auto record = std::make_shared<RequestRecord>(args.request_id, Side::kDecode, absl::Now());
  record->SetLabels("", args.source_daemon);
  record->num_layers = region->layout().spec().num_layers;
  auto request = std::make_shared<InboundRequest>(context_, args, std::move(region), record);
  std::weak_ptr<InboundRequest> weak = request;
  record->cancel = [weak](const absl::Status& why, bool notify_peer) {
    if (auto r = weak.lock()) r->Fail(why, notify_peer);
  };
  request->on_finished = [alive = alive_](const InboundRequest& r) {
    kvt::MutexLock lock(&alive->mu);
    if (alive->side != nullptr) alive->side->Forget(r);
  };
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
  // Outside the lock: the inboxes may be allocated and pinned now, and the pump must not wait for that.
  if (absl::Status s = request->ExpectLayers(/*link_group=*/first); !s.ok()) {
    request->Fail(s, /*notify_peer=*/false);
    return s;
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
