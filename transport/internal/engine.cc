#include "transport/internal/engine.h"

#include <pthread.h>

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "transport/internal/engine_records.h"
#include "transport/internal/mutex.h"

namespace kvt::transport::internal {
namespace {

// Chunks one link may hand the wire per round. Each costs a CRC32C pass on this thread, during which the wire is
// not progressed; a small batch keeps the bytes already handed over moving.
constexpr int kMaxChunksPerRound = 4;
// Idle rounds the progress thread polls before it sleeps (until its next timer, at most the wire's poll interval).
constexpr int kSpinRoundsBeforeSleep = 64;
constexpr absl::Duration kShutdownDrain = absl::Seconds(2);
// How long a shutdown waits for its peers to answer its goodbyes (control_message.h says why it waits).
constexpr absl::Duration kGoodbyeDrain = absl::Milliseconds(500);
// After a link fails, its transfers finish once the wire has completed (or cancelled) their sends, or after this
// long regardless: some UCX transports (shared memory in UCX 1.13) cannot cancel sends to a vanished peer, and
// a failed transfer must still finish in bounded time. The peer is gone, so nothing reads the bytes after that.
constexpr absl::Duration kAbandonSendsAfter = absl::Milliseconds(500);

template <typename T>
void RaiseMax(std::atomic<T>& max, T value) {
  T seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

Engine::Engine(Options options, Capabilities capabilities)
    : options_(std::move(options)),
      capabilities_(std::move(capabilities)),
      clock_(options_.clock),
      counters_(std::make_unique<Counters>()),
      // As many checksum threads per direction as UCX workers: with several, the wire moves bytes on that many
      // cores, and one CRC thread would bound it (measured: docs/BENCHMARKS.md, "Striping over UCX workers").
      verifier_(std::make_unique<ChunkVerifier>([this] { Wake(); }, options_.ucx_workers)),
      send_crcs_(std::make_unique<SendCrcPrecomputer>(options_.chunk_bytes, options_.ucx_workers)) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(Options options, Capabilities capabilities,
                                                       WireFactory make_wire) {
  auto validated = ValidateOptions(std::move(options));
  if (!validated.ok()) return validated.status();
  std::unique_ptr<Engine> engine(new Engine(*std::move(validated), std::move(capabilities)));
  auto started = std::make_shared<ConnectWaiter>();
  Engine* e = engine.get();
  engine->thread_ = std::thread([e, started, make_wire = std::move(make_wire)]() mutable {
    pthread_setname_np(pthread_self(), "kvt-progress");  // names it in perf, top -H and /proc
    auto wire = make_wire(e, [e] { e->Wake(); });
    if (!wire.ok()) {
      started->status = Detached(wire.status());
      started->done.Notify();
      return;
    }
    e->wire_ = *std::move(wire);
    e->address_ = e->wire_->address();
    started->done.Notify();
    e->Run();
  });
  started->done.WaitForNotification();
  if (!started->status.ok()) {
    engine->thread_.join();  // the thread has released its references to the status
    {
      internal::MutexLock lock(&engine->cmd_mu_);
      engine->stopping_ = true;
    }
    return started->status;
  }
  return engine;
}

Engine::~Engine() {
  {
    internal::MutexLock lock(&cmd_mu_);
    stopping_ = true;
    wake_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Engine::Wake() {
  internal::MutexLock lock(&cmd_mu_);
  wake_ = true;
}

absl::Status Engine::RunOnLoop(std::function<void()> fn) {
  auto done = std::make_shared<internal::Notification>();
  {
    internal::MutexLock lock(&cmd_mu_);
    if (stopping_) return absl::UnavailableError("transport is shutting down");
    commands_.push_back([fn = std::move(fn), done] {
      fn();
      done->Notify();
    });
  }
  done->WaitForNotification();
  return absl::OkStatus();
}

int Engine::RunCommands() {
  std::vector<std::function<void()>> batch;
  {
    internal::MutexLock lock(&cmd_mu_);
    batch.swap(commands_);
    wake_ = false;
  }
  for (auto& fn : batch) fn();
  return static_cast<int>(batch.size());
}

void Engine::IdleWait(absl::Duration max_wait) {
  if (max_wait <= absl::ZeroDuration()) return;
  internal::MutexLock lock(&cmd_mu_);
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cmd_mu_) {
    return wake_ || stopping_ || !commands_.empty();
  };
  cmd_mu_.AwaitWithTimeout(has_work, max_wait);
}

void Engine::Run() {
  int idle_rounds = 0;
  while (true) {
    bool stopping;
    {
      internal::MutexLock lock(&cmd_mu_);
      stopping = stopping_;
    }
    if (stopping) break;
    // RunCommands clears wake_; everything after it (the wire's events, a chunk verified) that arrives from here
    // on sets it again, so IdleWait below cannot sleep through it.
    int work = RunCommands();
    work += wire_->Progress();
    work += DeliverVerified();
    const absl::Time now = clock_->Now();
    absl::Time next_timer = now + wire_->idle_poll_interval();
    if (!frozen_.load(std::memory_order_relaxed)) {
      for (auto& [id, link] : links_) work += ServiceLink(*link, now, &next_timer);
    }
    if (work > 0) {
      idle_rounds = 0;
    } else if (++idle_rounds > kSpinRoundsBeforeSleep) {
      IdleWait(next_timer - clock_->Now());
    }
  }
  Shutdown();
}

void Engine::Shutdown() {
  RunCommands();
  shutting_down_ = true;
  // Tell every live peer first and wait, briefly, until each has answered: by then it has taken the link down as an
  // orderly close, so the endpoint errors our close causes there cannot be mistaken for a lost link. A peer that
  // is gone, stuck or does not answer holds the shutdown for at most kGoodbyeDrain.
  std::vector<PeerLink*> told;
  for (auto& [id, link] : links_) {
    if (!link->ready()) continue;
    SendControl(*link, ControlMessage{ControlType::kGoodbye, 0, kGoodbyeAnnounce}, clock_->Now());
    told.push_back(link.get());
  }
  const auto unanswered = [&told]() {
    return std::any_of(told.begin(), told.end(),
                       [](const PeerLink* l) { return l->down.ok() && !l->goodbye_answered; });
  };
  const absl::Time goodbye_deadline = clock_->Now() + kGoodbyeDrain;
  while (unanswered() && clock_->Now() < goodbye_deadline) {
    if (wire_->Progress() == 0) IdleWait(absl::Microseconds(100));
  }
  for (auto& [id, link] : links_) {
    LinkDown(*link, absl::UnavailableError("transport shut down"), DownCause::kShutdown);
  }
  const absl::Time give_up = clock_->Now() + kShutdownDrain;
  while (!send_records_.empty() && clock_->Now() < give_up) {
    if (wire_->Progress() == 0) IdleWait(absl::Microseconds(100));
  }
  if (!send_records_.empty()) {
    Logger("transport")->warn("{} sends still pending at shutdown", send_records_.size());
  }
  // The wire goes first: a wire with threads of its own may still be reading send bytes or writing into pending
  // receive buffers until it is destroyed; callers get their memory back only after that.
  wire_.reset();
  send_crcs_.reset();  // stops reading stream bytes before their transfers finish below
  for (auto& [id, t] : outbound_) t.state->Finish(absl::UnavailableError("transport shut down"));
  outbound_.clear();
  verifier_.reset();  // chunks still being checked are dropped: their links are down
  pending_reads_.clear();
  // Commands queued while shutting down must not leave their callers waiting.
  RunCommands();
}

PeerLink* Engine::FindLink(LinkId id) {
  auto it = links_.find(id);
  return it == links_.end() ? nullptr : it->second.get();
}

namespace {

bool LowerStageOnWire(const PeerLink& link, uint8_t stage) {
  for (uint8_t s = 0; s < stage; ++s) {
    if (link.chunks_on_wire[s] > 0) return true;
  }
  return false;
}

}  // namespace

int Engine::ServiceLink(PeerLink& link, absl::Time now, absl::Time* next_timer) {
  if (!link.down.ok()) {
    if (link.transfers.empty()) return 0;
    if (now - link.down_at < kAbandonSendsAfter) {
      *next_timer = std::min(*next_timer, link.down_at + kAbandonSendsAfter);
      return 0;
    }
    const std::vector<uint64_t> ids(link.transfers.begin(), link.transfers.end());
    for (uint64_t id : ids) {
      auto it = outbound_.find(id);
      if (it == outbound_.end()) continue;
      it->second.sends_outstanding = 0;  // late OnSendDone calls find no transfer and are ignored
      MaybeFinish(id);
    }
    return 1;
  }
  int work = 0;
  if (link.wire_up) {
    const int64_t credit = link.credit->to_return.exchange(0, std::memory_order_acquire);
    if (credit > 0) {
      SendControl(link, ControlMessage{ControlType::kCredit, static_cast<uint64_t>(credit), 0}, now);
      ++work;
    }
    if (now - link.last_heard >= options_.peer_timeout) {
      LinkDown(link, absl::UnavailableError(absl::StrFormat("no message from peer for %s",
                                                            absl::FormatDuration(now - link.last_heard))));
      return work + 1;
    }
    if (now - link.last_sent >= options_.heartbeat_interval) {
      SendControl(link, ControlMessage{ControlType::kPing, 0, 0}, now);
      if (!link.down.ok()) return work + 1;
    }
    *next_timer = std::min(*next_timer, link.last_sent + options_.heartbeat_interval);
  }
  if (!link.ready()) return work;
  for (int i = 0; i < kMaxChunksPerRound && link.down.ok(); ++i) {
    const auto cut = link.scheduler.Peek(now);
    if (!cut.has_value()) {
      link.blocked_since = absl::InfiniteFuture();
      break;
    }
    // Over a wire of parallel paths, a chunk waits until the lower-stage chunks before it are done, or it could
    // arrive first. A promoted one goes, and so does one held for a starvation bound (lower stages that keep
    // arriving, or a send that never completes, must not hold it longer than the scheduler would).
    if (!wire_->ordered() && !cut->promoted && LowerStageOnWire(link, cut->stage)) {
      if (link.held_since == absl::InfiniteFuture()) link.held_since = now;
      if (now - link.held_since < options_.starvation_bound) {
        *next_timer = std::min(*next_timer, link.held_since + options_.starvation_bound);
        break;
      }
    }
    link.held_since = absl::InfiniteFuture();
    const int64_t wire_bytes = int64_t{cut->length} + static_cast<int64_t>(kChunkHeaderBytes);
    if (link.inflight + wire_bytes > link.window) {
      if (link.blocked_since == absl::InfiniteFuture()) link.blocked_since = now;
      break;
    }
    link.blocked_since = absl::InfiniteFuture();
    const absl::Duration wait = link.bucket.TimeUntilAvailable(wire_bytes);
    if (wait > absl::ZeroDuration()) {
      *next_timer = std::min(*next_timer, now + wait);
      break;
    }
    link.bucket.TryTake(wire_bytes);
    link.scheduler.Commit(*cut, now);
    SendChunk(link, *cut, now);
    ++work;
  }
  if (link.down.ok() && link.blocked_since != absl::InfiniteFuture() &&
      now - link.blocked_since >= options_.stall_timeout) {
    const std::vector<uint64_t> ids(link.transfers.begin(), link.transfers.end());
    for (uint64_t id : ids) {
      auto it = outbound_.find(id);
      if (it == outbound_.end()) continue;
      counters_->transfers_stalled.fetch_add(1, std::memory_order_relaxed);
      FailTransfer(it->second, absl::DeadlineExceededError(absl::StrFormat(
                                   "peer granted no credit for %s", absl::FormatDuration(now - link.blocked_since))));
    }
    link.blocked_since = absl::InfiniteFuture();
    ++work;
  }
  return work;
}

void Engine::SendChunk(PeerLink& link, const LaneScheduler::Cut& cut, absl::Time now) {
  OutboundTransfer& t = outbound_.at(cut.key.transfer_id);
  const OutboundStream& s = t.streams[cut.key.index];
  const uint8_t* bytes = s.bytes.data() + cut.offset;
  ChunkHeader h;
  h.transfer_id = t.id;
  h.page = s.page;
  h.stage = s.stage;
  h.offset = cut.offset;
  h.length = cut.length;
  const absl::Span<const uint8_t> chunk = absl::MakeConstSpan(bytes, cut.length);
  h.payload_crc32c = send_crcs_ != nullptr ? send_crcs_->Take(t.id, cut.key.index, cut.offset, chunk)
                                           : Crc32c(chunk.data(), chunk.size());
  auto rec = std::make_unique<SendRecord>();
  rec->kind = MessageKind::kChunk;
  rec->link = link.id;
  rec->transfer_id = t.id;
  rec->stage = cut.stage;
  EncodeChunkHeader(h, absl::MakeSpan(rec->chunk_header));
  const uint64_t cookie = next_cookie_++;
  const absl::Status sent =
      wire_->Send(link.id, MessageKind::kChunk, rec->chunk_header, absl::MakeConstSpan(bytes, cut.length), cookie);
  t.bytes_unsent -= cut.length;
  if (!sent.ok()) {
    LinkDown(link, absl::UnavailableError(absl::StrCat("send failed: ", sent.message())));
    return;
  }
  send_records_.emplace(cookie, std::move(rec));
  const int64_t wire_bytes = int64_t{cut.length} + static_cast<int64_t>(kChunkHeaderBytes);
  link.inflight += wire_bytes;
  link.last_sent = now;
  ++link.sends_outstanding;
  ++link.chunks_on_wire[cut.stage];
  ++t.sends_outstanding;
  RaiseMax(counters_->max_inflight, link.inflight);
  counters_->chunks_sent.fetch_add(1, std::memory_order_relaxed);
  counters_->payload_bytes_sent.fetch_add(cut.length, std::memory_order_relaxed);
  if (cut.stage == 0) counters_->anchor_chunks_sent.fetch_add(1, std::memory_order_relaxed);
  if (cut.promoted) counters_->promoted_chunks_sent.fetch_add(1, std::memory_order_relaxed);
}

void Engine::SendControl(PeerLink& link, const ControlMessage& m, absl::Time now, bool peer_shutdown) {
  auto rec = std::make_unique<SendRecord>();
  rec->kind = MessageKind::kControl;
  rec->link = link.id;
  rec->control = EncodeControlMessage(m);
  const uint64_t cookie = next_cookie_++;
  const absl::Status sent = wire_->Send(link.id, MessageKind::kControl, rec->control, {}, cookie);
  if (!sent.ok()) {
    if (peer_shutdown) {
      LinkDown(link, absl::UnavailableError("peer shut down"), DownCause::kPeerShutdown);
    } else if (shutting_down_) {  // our own goodbye could not leave: the link goes down with the shutdown anyway
      LinkDown(link, absl::UnavailableError("transport shut down"), DownCause::kShutdown);
    } else {
      LinkDown(link, absl::UnavailableError(absl::StrCat("send failed: ", sent.message())));
    }
    return;
  }
  send_records_.emplace(cookie, std::move(rec));
  ++link.sends_outstanding;
  link.last_sent = now;
}

void Engine::FailTransfer(OutboundTransfer& t, absl::Status status) {
  if (!t.failure.ok()) return;
  t.failure = std::move(status);
  if (PeerLink* link = FindLink(t.link)) link->scheduler.RemoveTransfer(t.id);
  t.bytes_unsent = 0;
  MaybeFinish(t.id);
}

void Engine::MaybeFinish(uint64_t transfer_id) {
  auto it = outbound_.find(transfer_id);
  if (it == outbound_.end()) return;
  OutboundTransfer& t = it->second;
  if (t.sends_outstanding > 0 || (t.failure.ok() && (t.bytes_unsent > 0 || !t.acked))) return;
  if (send_crcs_ != nullptr) send_crcs_->Forget(t.id);  // before the caller may free the stream bytes
  t.state->Finish(t.failure);
  if (PeerLink* link = FindLink(t.link)) link->transfers.erase(t.id);
  outbound_.erase(it);
}

void Engine::LinkDown(PeerLink& link, absl::Status status, DownCause cause) {
  if (!link.down.ok()) return;
  link.down = status;
  link.down_at = clock_->Now();
  counters_->links_down.fetch_add(1, std::memory_order_relaxed);
  if (cause == DownCause::kFailure) {
    Logger("transport")->warn("link {} down: {}", link.id, status.ToString());
  } else if (cause == DownCause::kPeerShutdown) {
    Logger("transport")->info("link {} closed by its peer: {}", link.id, status.ToString());
  } else {
    Logger("transport")->debug("link {} closed: {}", link.id, status.ToString());
  }
  wire_->Close(link.id);
  const std::vector<uint64_t> ids(link.transfers.begin(), link.transfers.end());
  for (uint64_t id : ids) {
    auto it = outbound_.find(id);
    if (it != outbound_.end()) FailTransfer(it->second, status);
  }
  table_.FailLink(link.id, status);
  auto waiter = connect_waiters_.find(link.id);
  if (waiter != connect_waiters_.end()) {
    waiter->second->status = Detached(status);
    waiter->second->done.Notify();
    connect_waiters_.erase(waiter);
  }
}

void Engine::OnLinkUp(LinkId id, bool inbound) {
  const absl::Time now = clock_->Now();
  PeerLink* link = FindLink(id);
  if (link == nullptr) {
    auto made = std::make_unique<PeerLink>(id, inbound, options_.chunk_bytes, options_.starvation_bound,
                                           options_.rate_bytes_per_second, options_.burst_bytes,
                                           options_.max_receive_buffer_bytes, clock_, now);
    link = made.get();
    links_.emplace(id, std::move(made));
  }
  link->wire_up = true;
  link->last_heard = now;
  SendControl(*link, ControlMessage{ControlType::kHello, static_cast<uint64_t>(options_.max_receive_buffer_bytes), 0},
              now);
}

void Engine::OnLinkDown(LinkId id, absl::Status status) {
  if (PeerLink* link = FindLink(id)) {
    if (shutting_down_) {  // the peer answered our goodbye and closed (its answer may come after the close)
      LinkDown(*link, absl::UnavailableError("transport shut down"), DownCause::kShutdown);
      return;
    }
    LinkDown(*link, absl::UnavailableError(absl::StrCat("peer link lost: ", status.message())));
  }
}

void Engine::OnMessage(LinkId id, MessageKind kind, absl::Span<const uint8_t> header, InboundPayload& payload) {
  PeerLink* link = FindLink(id);
  if (link == nullptr || !link->down.ok() || frozen_.load(std::memory_order_relaxed)) return;
  link->last_heard = clock_->Now();
  if (kind == MessageKind::kChunk) {
    HandleChunk(*link, header, payload);
    return;
  }
  auto m = DecodeControlMessage(header);
  if (!m.ok() || payload.length() != 0) {
    counters_->rejected_malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (m->type) {
    case ControlType::kHello: {
      link->window = std::min<int64_t>(options_.max_inflight_bytes, static_cast<int64_t>(m->a));
      const int64_t one_chunk = int64_t{options_.chunk_bytes} + static_cast<int64_t>(kChunkHeaderBytes);
      if (link->window < one_chunk) {
        LinkDown(*link, absl::FailedPreconditionError(absl::StrFormat(
                            "peer's receive buffer %d is below one chunk of %d bytes", link->window, one_chunk)));
        return;
      }
      link->hello_received = true;
      auto waiter = connect_waiters_.find(id);
      if (waiter != connect_waiters_.end()) {
        waiter->second->status = absl::OkStatus();
        waiter->second->done.Notify();
        connect_waiters_.erase(waiter);
      }
      break;
    }
    case ControlType::kCredit:
      link->inflight = std::max<int64_t>(0, link->inflight - static_cast<int64_t>(m->a));
      link->blocked_since = absl::InfiniteFuture();
      break;
    case ControlType::kPing:
      break;
    case ControlType::kGoodbye:
      if (m->b == kGoodbyeAnswer) {
        link->goodbye_answered = true;
        break;
      }
      // Answer before the link goes down here: the peer closes its endpoints only after this arrives (or its
      // short deadline passes), so "peer shut down" is what this side's transfers on the link report.
      SendControl(*link, ControlMessage{ControlType::kGoodbye, 0, kGoodbyeAnswer}, clock_->Now(),
                  /*peer_shutdown=*/true);
      LinkDown(*link, absl::UnavailableError("peer shut down"), DownCause::kPeerShutdown);
      break;
    case ControlType::kAck: {
      auto it = outbound_.find(m->a);
      if (it != outbound_.end() && it->second.link == id) {
        it->second.acked = true;
        MaybeFinish(m->a);
      }
      break;
    }
    case ControlType::kAbort: {
      auto it = outbound_.find(m->a);
      if (it != outbound_.end() && it->second.link == id) {
        const auto code = static_cast<absl::StatusCode>(m->b);
        FailTransfer(it->second, absl::Status(code == absl::StatusCode::kOk ? absl::StatusCode::kAborted : code,
                                              absl::StrFormat("receiver rejected transfer %d", m->a)));
      }
      break;
    }
  }
}

void Engine::HandleChunk(PeerLink& link, absl::Span<const uint8_t> header, InboundPayload& payload) {
  const int64_t wire_bytes = static_cast<int64_t>(header.size() + payload.length());
  auto h = DecodeChunkHeader(header);
  if (!h.ok() || h->length != payload.length()) {
    counters_->rejected_malformed.fetch_add(1, std::memory_order_relaxed);
    link.credit->to_return.fetch_add(wire_bytes, std::memory_order_release);
    return;
  }
  absl::StatusOr<TransferTable::Placement> admitted = table_.Admit(link.id, *h);
  if (!admitted.ok()) {
    if (admitted.status().code() == absl::StatusCode::kNotFound) {
      // Not ours to fail (it may be another link's transfer); tell this sender, which waits for an ack.
      counters_->rejected_unknown_transfer.fetch_add(1, std::memory_order_relaxed);
      link.credit->to_return.fetch_add(wire_bytes, std::memory_order_release);
      SendControl(link,
                  ControlMessage{ControlType::kAbort, h->transfer_id, static_cast<uint64_t>(absl::StatusCode::kNotFound)},
                  clock_->Now());
    } else {
      counters_->rejected_out_of_bounds.fetch_add(1, std::memory_order_relaxed);
      RejectChunk(link.id, h->transfer_id, admitted.status(), wire_bytes);
    }
    return;
  }
  const int64_t buffered = link.credit->buffered.load(std::memory_order_relaxed) + wire_bytes;
  if (buffered > options_.max_receive_buffer_bytes) {
    counters_->rejected_over_window.fetch_add(1, std::memory_order_relaxed);
    RejectChunk(link.id, h->transfer_id,
                absl::ResourceExhaustedError(absl::StrFormat(
                    "peer sent past its receive buffer of %d bytes", options_.max_receive_buffer_bytes)),
                wire_bytes);
    return;
  }
  link.credit->buffered.fetch_add(wire_bytes, std::memory_order_relaxed);
  RaiseMax(counters_->max_buffered, buffered);
  // Straight into the receiver's memory where it gave some (the owner keeps it valid while the read is pending),
  // else into one of the link's receive buffers.
  PayloadBuffer buf = admitted->destination != nullptr
                          ? PayloadBuffer(admitted->destination, PayloadRelease{nullptr, std::move(admitted->owner)})
                          : link.receive_buffers->Take(h->length);
  const uint64_t cookie = next_cookie_++;
  auto done = payload.ReadInto(buf.get(), cookie);
  if (!done.ok()) {
    table_.Fail(h->transfer_id, absl::UnavailableError(absl::StrCat("chunk payload lost: ", done.status().message())));
    link.credit->Return(wire_bytes);
    return;
  }
  if (*done) {
    FinishChunk(link.id, *h, std::move(buf), wire_bytes);
    return;
  }
  auto pending = std::make_unique<PendingRead>();
  pending->link = link.id;
  pending->header = *h;
  pending->payload = std::move(buf);
  pending->wire_bytes = wire_bytes;
  pending_reads_.emplace(cookie, std::move(pending));
}

void Engine::RejectChunk(LinkId id, uint64_t transfer_id, const absl::Status& status, int64_t wire_bytes) {
  table_.Fail(transfer_id, status);
  PeerLink* link = FindLink(id);
  if (link == nullptr) return;
  link->credit->to_return.fetch_add(wire_bytes, std::memory_order_release);
  if (link->down.ok() && link->wire_up) {
    SendControl(*link,
                ControlMessage{ControlType::kAbort, transfer_id, static_cast<uint64_t>(status.code())},
                clock_->Now());
  }
}

void Engine::FinishChunk(LinkId id, const ChunkHeader& h, PayloadBuffer payload, int64_t wire_bytes) {
  if (verifier_ == nullptr) return;  // shut down: the chunk's link is down and its transfer failed
  VerifiedChunk chunk;
  chunk.link = id;
  chunk.header = h;
  chunk.payload = std::move(payload);
  chunk.wire_bytes = wire_bytes;
  verifier_->Submit(std::move(chunk));
}

int Engine::DeliverVerified() {
  std::deque<VerifiedChunk> verified = verifier_->TakeVerified();
  for (VerifiedChunk& chunk : verified) {
    const LinkId id = chunk.link;
    const ChunkHeader& h = chunk.header;
    const int64_t wire_bytes = chunk.wire_bytes;
    PeerLink* link = FindLink(id);
    if (link == nullptr) continue;
    if (!chunk.crc_ok) {
      counters_->rejected_bad_crc.fetch_add(1, std::memory_order_relaxed);
      link->credit->buffered.fetch_sub(wire_bytes, std::memory_order_relaxed);
      RejectChunk(id, h.transfer_id,
                  absl::DataLossError(absl::StrFormat("chunk [%d, +%d) of transfer %d page %d stage %d: bad CRC32C",
                                                      h.offset, h.length, h.transfer_id, h.page, h.stage)),
                  wire_bytes);
      continue;
    }
    counters_->chunks_received.fetch_add(1, std::memory_order_relaxed);
    counters_->payload_bytes_received.fetch_add(h.length, std::memory_order_relaxed);
    if (table_.Deliver(h, std::move(chunk.payload), wire_bytes, link->credit) && link->down.ok() &&
        link->wire_up) {
      SendControl(*link, ControlMessage{ControlType::kAck, h.transfer_id, 0}, clock_->Now());
    }
  }
  return static_cast<int>(verified.size());
}

void Engine::OnPayloadRead(uint64_t cookie, absl::Status status) {
  auto it = pending_reads_.find(cookie);
  if (it == pending_reads_.end()) return;
  std::unique_ptr<PendingRead> read = std::move(it->second);
  pending_reads_.erase(it);
  if (!status.ok()) {
    table_.Fail(read->header.transfer_id, absl::UnavailableError(absl::StrCat("chunk payload lost: ", status.message())));
    if (PeerLink* link = FindLink(read->link)) link->credit->Return(read->wire_bytes);
    return;
  }
  FinishChunk(read->link, read->header, std::move(read->payload), read->wire_bytes);
}

void Engine::OnSendDone(uint64_t cookie, absl::Status status) {
  auto it = send_records_.find(cookie);
  if (it == send_records_.end()) return;
  std::unique_ptr<SendRecord> rec = std::move(it->second);
  send_records_.erase(it);
  PeerLink* link = FindLink(rec->link);
  if (link != nullptr) {
    --link->sends_outstanding;
    if (rec->kind == MessageKind::kChunk && !rec->raw) --link->chunks_on_wire[rec->stage];
    if (!status.ok()) LinkDown(*link, absl::UnavailableError(absl::StrCat("send failed: ", status.message())));
  }
  if (rec->kind == MessageKind::kChunk && !rec->raw) {
    auto t = outbound_.find(rec->transfer_id);
    if (t != outbound_.end()) {
      --t->second.sends_outstanding;
      MaybeFinish(rec->transfer_id);
    }
  }
}

}  // namespace kvt::transport::internal
