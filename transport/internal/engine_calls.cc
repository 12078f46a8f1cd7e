// The Transport calls other threads make on the link engine (engine.h): each checks its arguments, then hands the
// work to the progress thread (RunOnLoop) or reads what that thread publishes. The progress thread's own work is in
// engine.cc.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/internal/engine.h"
#include "transport/internal/engine_records.h"

namespace kvt::transport::internal {
namespace {

absl::Status ValidateStreams(uint64_t transfer_id, const std::vector<OutboundStream>& streams) {
  if (streams.empty()) return absl::InvalidArgumentError(absl::StrFormat("transfer %d has no streams", transfer_id));
  for (size_t i = 0; i < streams.size(); ++i) {
    const OutboundStream& s = streams[i];
    if (s.stage >= kMaxStages) return absl::InvalidArgumentError(absl::StrFormat("stage %d out of range", s.stage));
    if (s.bytes.empty()) return absl::InvalidArgumentError("a stream must not be empty");
    for (size_t j = 0; j < i; ++j) {
      if (streams[j].page == s.page && streams[j].stage == s.stage) {
        return absl::InvalidArgumentError(absl::StrFormat("duplicate stream page %d stage %d", s.page, s.stage));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PeerId> Engine::Connect(const std::string& address, absl::Duration timeout) {
  auto waiter = std::make_shared<ConnectWaiter>();
  absl::StatusOr<LinkId> id = absl::UnknownError("not run");
  absl::Status queued = RunOnLoop([&] {
    id = wire_->Connect(address);
    if (!id.ok()) return;
    const absl::Time now = clock_->Now();
    links_.emplace(*id, std::make_unique<PeerLink>(*id, false, options_.chunk_bytes, options_.starvation_bound,
                                                   options_.rate_bytes_per_second, options_.burst_bytes,
                                                   options_.max_receive_buffer_bytes, clock_, now));
    connect_waiters_.emplace(*id, waiter);
  });
  if (!queued.ok()) return queued;
  if (!id.ok()) return id.status();
  if (!waiter->done.WaitForNotificationWithTimeout(timeout)) {
    const LinkId link_id = *id;
    RunOnLoop([&] {
      connect_waiters_.erase(link_id);
      if (PeerLink* link = FindLink(link_id)) {
        LinkDown(*link, absl::UnavailableError(
                            absl::StrFormat("no answer from %s within %s", address, absl::FormatDuration(timeout))));
      }
    }).IgnoreError();
    if (!waiter->done.HasBeenNotified()) {
      return absl::UnavailableError(
          absl::StrFormat("no answer from %s within %s", address, absl::FormatDuration(timeout)));
    }
  }
  if (!waiter->status.ok()) return Detached(waiter->status);
  return *id;
}

absl::StatusOr<std::shared_ptr<SendHandle>> Engine::Send(PeerId peer, uint64_t transfer_id,
                                                         std::vector<OutboundStream> streams) {
  absl::Status valid = ValidateStreams(transfer_id, streams);
  if (!valid.ok()) return valid;
  auto state = std::make_shared<SendState>();
  absl::Status result;
  absl::Status queued = RunOnLoop([&] {
    PeerLink* link = FindLink(peer);
    if (link == nullptr || link->inbound) {
      result = absl::NotFoundError(absl::StrFormat("no peer %d", peer));
      return;
    }
    if (!link->down.ok()) {
      result = absl::UnavailableError(absl::StrCat("peer link is down: ", link->down.message()));
      return;
    }
    if (outbound_.contains(transfer_id)) {
      result = absl::AlreadyExistsError(absl::StrFormat("transfer %d is already being sent", transfer_id));
      return;
    }
    if (static_cast<int>(link->transfers.size()) >= options_.max_transfers_per_link) {
      result = absl::ResourceExhaustedError(
          absl::StrFormat("%d transfers already queued on peer %d", link->transfers.size(), peer));
      return;
    }
    const absl::Time now = clock_->Now();
    OutboundTransfer& t = outbound_[transfer_id];
    t.id = transfer_id;
    t.link = peer;
    t.state = state;
    t.streams = std::move(streams);
    for (uint32_t i = 0; i < t.streams.size(); ++i) {
      t.bytes_unsent += t.streams[i].bytes.size();
      link->scheduler.Add(StreamKey{transfer_id, i}, t.streams[i].stage, t.streams[i].bytes.size(), now);
      if (send_crcs_ != nullptr) send_crcs_->Add(transfer_id, i, t.streams[i].stage, t.streams[i].bytes);
    }
    link->transfers.insert(transfer_id);
  });
  if (!queued.ok()) return queued;
  if (!result.ok()) return result;
  return std::shared_ptr<SendHandle>(state);
}

absl::Status Engine::Expect(uint64_t transfer_id, std::vector<StreamBounds> streams, uint64_t link_group,
                            std::shared_ptr<const void> placement_owner) {
  return table_.Expect(transfer_id, std::move(streams), link_group, std::move(placement_owner));
}

absl::StatusOr<ReceivedChunk> Engine::Receive(uint64_t transfer_id, absl::Duration timeout) {
  return table_.Receive(transfer_id, timeout);
}

absl::StatusOr<InboundEvent> Engine::ReceiveAny(absl::Duration timeout) { return table_.ReceiveAny(timeout); }

void Engine::Cancel(uint64_t transfer_id) {
  table_.Cancel(transfer_id);
  RunOnLoop([&] {
    auto it = outbound_.find(transfer_id);
    if (it != outbound_.end()) {
      FailTransfer(it->second, absl::CancelledError(absl::StrFormat("transfer %d cancelled", transfer_id)));
    }
  }).IgnoreError();
}

TransportStats Engine::stats() const {
  const Counters& c = *counters_;
  TransportStats s;
  s.chunks_sent = c.chunks_sent.load();
  s.payload_bytes_sent = c.payload_bytes_sent.load();
  s.anchor_chunks_sent = c.anchor_chunks_sent.load();
  s.promoted_chunks_sent = c.promoted_chunks_sent.load();
  s.chunks_received = c.chunks_received.load();
  s.payload_bytes_received = c.payload_bytes_received.load();
  s.rejected_malformed = c.rejected_malformed.load();
  s.rejected_bad_crc = c.rejected_bad_crc.load();
  s.rejected_unknown_transfer = c.rejected_unknown_transfer.load();
  s.rejected_out_of_bounds = c.rejected_out_of_bounds.load();
  s.rejected_over_window = c.rejected_over_window.load();
  s.links_down = c.links_down.load();
  s.transfers_stalled = c.transfers_stalled.load();
  s.max_inflight_bytes_seen = c.max_inflight.load();
  s.max_receive_buffered_bytes_seen = c.max_buffered.load();
  return s;
}

absl::Status Engine::SendRawChunkForTest(PeerId peer, std::vector<uint8_t> header, std::vector<uint8_t> payload) {
  absl::Status result;
  absl::Status queued = RunOnLoop([&] {
    PeerLink* link = FindLink(peer);
    if (link == nullptr || !link->ready()) {
      result = absl::UnavailableError("peer link not ready");
      return;
    }
    auto rec = std::make_unique<SendRecord>();
    rec->kind = MessageKind::kChunk;
    rec->link = peer;
    rec->raw = true;
    rec->raw_header = std::move(header);
    rec->raw_payload = std::move(payload);
    const uint64_t cookie = next_cookie_++;
    result = wire_->Send(peer, MessageKind::kChunk, rec->raw_header, rec->raw_payload, cookie);
    if (result.ok()) {
      ++link->sends_outstanding;
      send_records_.emplace(cookie, std::move(rec));
    }
  });
  if (!queued.ok()) return queued;
  return result;
}

void Engine::FreezeForTest() { frozen_.store(true); }

}  // namespace kvt::transport::internal
