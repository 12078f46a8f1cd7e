#include "transport/internal/transfer_table.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "absl/strings/str_format.h"
#include "transport/internal/detached_status.h"
#include "transport/internal/range_set.h"
#include "transport/internal/mutex.h"

namespace kvt::transport {
namespace {

constexpr uint64_t kUnbound = ~uint64_t{0};

// A verified chunk that arrived ahead of a gap in its stream. Returns its credit if dropped.
struct HeldChunk {
  ChunkHeader header;
  PayloadBuffer payload;
  int64_t credit_bytes = 0;
  std::shared_ptr<CreditReturn> credit;

  HeldChunk(HeldChunk&&) = default;
  HeldChunk(ChunkHeader h, PayloadBuffer p, int64_t b, std::shared_ptr<CreditReturn> c)
      : header(h), payload(std::move(p)), credit_bytes(b), credit(std::move(c)) {}
  ~HeldChunk() {
    payload.reset();  // before the credit, as ReceivedChunk does
    if (credit != nullptr) credit->Return(credit_bytes);
  }
};

struct InboundStream {
  StreamBounds bounds;
  internal::RangeSet admitted;
  uint64_t next_deliver = 0;
  std::map<uint64_t, HeldChunk> held;  // offset -> chunk arrived ahead of next_deliver
};

}  // namespace

// All fields are guarded by TransferTable::mu_.
struct TransferTable::Entry {
  uint64_t generation = 0;
  std::shared_ptr<const void> placement_owner;  // keeps the streams' destinations valid
  uint64_t link = kUnbound;
  uint64_t link_group = 0;  // nonzero: binding one transfer of the group binds all of it
  std::vector<InboundStream> streams;
  uint64_t total_bytes = 0;
  uint64_t delivered_bytes = 0;  // handed to the ready queue
  std::deque<ReceivedChunk> ready;
  absl::Status status;  // non-OK once failed
  bool complete_handed_out = false;
  bool removed = false;  // no longer in the table: failure or last chunk handed out, or cancelled

  InboundStream* Find(uint32_t page, uint8_t stage) {
    for (InboundStream& s : streams) {
      if (s.bounds.page == page && s.bounds.stage == stage) return &s;
    }
    return nullptr;
  }
  // Returns whether this failed the transfer (false if it had already failed).
  bool FailWith(const absl::Status& s) {
    if (!status.ok()) return false;
    status = internal::Detached(s);
    ready.clear();  // chunks return their credit as they are destroyed
    for (InboundStream& st : streams) st.held.clear();
    return true;
  }
};

TransferTable::TransferTable() = default;
TransferTable::~TransferTable() = default;

absl::Status TransferTable::Expect(uint64_t id, std::vector<StreamBounds> streams, uint64_t link_group,
                                   std::shared_ptr<const void> placement_owner) {
  if (streams.empty()) return absl::InvalidArgumentError("a transfer needs at least one stream");
  auto entry = std::make_shared<Entry>();
  entry->link_group = link_group;
  entry->placement_owner = std::move(placement_owner);
  for (const StreamBounds& b : streams) {
    if (b.length == 0) return absl::InvalidArgumentError("stream length must be positive");
    if (b.stage >= kMaxStages) return absl::InvalidArgumentError(absl::StrFormat("stage %d out of range", b.stage));
    if (entry->Find(b.page, b.stage) != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("duplicate stream page %d stage %d", b.page, b.stage));
    }
    InboundStream s;
    s.bounds = b;
    entry->streams.push_back(std::move(s));
    entry->total_bytes += b.length;
  }
  internal::MutexLock lock(&mu_);
  entry->generation = next_generation_++;
  if (!entries_.emplace(id, std::move(entry)).second) {
    return absl::AlreadyExistsError(absl::StrFormat("transfer %d is already expected", id));
  }
  return absl::OkStatus();
}

absl::StatusOr<TransferTable::Placement> TransferTable::Admit(uint64_t link, const ChunkHeader& h) {
  internal::MutexLock lock(&mu_);
  auto it = entries_.find(h.transfer_id);
  if (it == entries_.end() || !it->second->status.ok()) {
    return absl::NotFoundError(absl::StrFormat("chunk for unknown transfer %d", h.transfer_id));
  }
  Entry& e = *it->second;
  if (e.link != kUnbound && e.link != link) {
    return absl::NotFoundError(absl::StrFormat("chunk for transfer %d from a link it is not bound to", h.transfer_id));
  }
  InboundStream* s = e.Find(h.page, h.stage);
  absl::Status bad;
  if (s == nullptr) {
    bad = absl::OutOfRangeError(absl::StrFormat("transfer %d has no stream page %d stage %d", h.transfer_id,
                                                h.page, h.stage));
  } else if (h.length == 0 || h.offset + h.length > s->bounds.length) {
    bad = absl::OutOfRangeError(absl::StrFormat("chunk [%d, +%d) outside stream page %d stage %d of length %d",
                                                h.offset, h.length, h.page, h.stage, s->bounds.length));
  } else if (!s->admitted.InsertIfDisjoint(h.offset, h.offset + h.length)) {
    bad = absl::OutOfRangeError(absl::StrFormat("chunk [%d, +%d) of page %d stage %d overlaps received bytes",
                                                h.offset, h.length, h.page, h.stage));
  }
  if (!bad.ok()) {
    if (e.FailWith(bad)) PublishFailure(h.transfer_id, e);
    return bad;
  }
  if (e.link == kUnbound && e.link_group != 0) {
    // Once per group: the request's other transfers now belong to this link too.
    for (auto& [other_id, other] : entries_) {
      if (other->link_group == e.link_group && other->link == kUnbound) other->link = link;
    }
  }
  e.link = link;
  Placement placement;
  if (s->bounds.destination != nullptr) {
    placement.destination = s->bounds.destination + h.offset;
    placement.owner = e.placement_owner;
  }
  return placement;
}

bool TransferTable::Deliver(const ChunkHeader& h, PayloadBuffer payload, int64_t credit_bytes,
                            std::shared_ptr<CreditReturn> credit) {
  HeldChunk chunk(h, std::move(payload), credit_bytes, std::move(credit));
  internal::MutexLock lock(&mu_);
  auto it = entries_.find(h.transfer_id);
  if (it == entries_.end() || !it->second->status.ok()) return false;  // `chunk` returns its credit
  Entry& e = *it->second;
  InboundStream* s = e.Find(h.page, h.stage);
  if (s == nullptr) return false;
  const bool was_complete = e.delivered_bytes == e.total_bytes;
  s->held.emplace(h.offset, std::move(chunk));
  while (!s->held.empty() && s->held.begin()->first == s->next_deliver) {
    HeldChunk& c = s->held.begin()->second;
    s->next_deliver += c.header.length;
    e.delivered_bytes += c.header.length;
    const bool stream_complete = s->next_deliver == s->bounds.length;
    const bool transfer_complete = e.delivered_bytes == e.total_bytes;
    const uint64_t arrival = next_arrival_++;
    e.ready.emplace_back(c.header, std::move(c.payload), stream_complete, transfer_complete, arrival,
                         c.credit_bytes, std::move(c.credit));
    c.credit = nullptr;
    s->held.erase(s->held.begin());
    Publish({h.transfer_id, e.generation, /*failure=*/false, arrival});
  }
  return !was_complete && e.delivered_bytes == e.total_bytes;
}

void TransferTable::Fail(uint64_t id, absl::Status status) {
  internal::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second->FailWith(status)) PublishFailure(id, *it->second);
}

void TransferTable::FailLink(uint64_t link, const absl::Status& status) {
  internal::MutexLock lock(&mu_);
  for (auto& [id, entry] : entries_) {
    if (entry->link == link && entry->FailWith(status)) PublishFailure(id, *entry);
  }
}

bool TransferTable::Cancel(uint64_t id) {
  internal::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  it->second->FailWith(absl::CancelledError(absl::StrFormat("transfer %d cancelled", id)));
  it->second->removed = true;
  entries_.erase(it);
  return true;
}

absl::StatusOr<ReceivedChunk> TransferTable::Receive(uint64_t id, absl::Duration timeout) {
  internal::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrFormat("transfer %d is not expected", id));
  std::shared_ptr<Entry> entry = it->second;
  Entry* e = entry.get();
  auto has_news = [e]() { return !e->ready.empty() || !e->status.ok() || e->removed; };
  if (!mu_.AwaitWithTimeout(has_news, timeout)) {
    return absl::DeadlineExceededError(
        absl::StrFormat("no chunk of transfer %d within %s", id, absl::FormatDuration(timeout)));
  }
  if (!e->status.ok()) {
    absl::Status s = internal::Detached(e->status);
    Remove(id, entry);
    return s;
  }
  if (e->ready.empty()) {
    return absl::NotFoundError(absl::StrFormat("transfer %d was drained by another consumer", id));
  }
  ReceivedChunk chunk = std::move(e->ready.front());
  e->ready.pop_front();
  if (chunk.transfer_complete()) Remove(id, entry);
  return chunk;
}

absl::StatusOr<InboundEvent> TransferTable::ReceiveAny(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  internal::MutexLock lock(&mu_);
  while (true) {
    while (!news_.empty() && !IsLive(news_.front())) news_.pop_front();
    if (!news_.empty()) break;
    // No stale news is queued now, so the next one published is live (unless Receive takes it first: loop).
    auto has_news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !news_.empty(); };
    if (!mu_.AwaitWithTimeout(has_news, deadline - absl::Now())) {
      return absl::DeadlineExceededError(
          absl::StrFormat("no chunk or failure of any transfer within %s", absl::FormatDuration(timeout)));
    }
  }
  const News n = news_.front();
  news_.pop_front();
  std::shared_ptr<Entry> entry = entries_.find(n.transfer_id)->second;  // present: `n` is live
  InboundEvent event;
  event.transfer_id = n.transfer_id;
  if (n.failure) {
    event.status = internal::Detached(entry->status);
    Remove(n.transfer_id, entry);
    return event;
  }
  // The chunk `n` announced: older ones of this transfer were handed out before it.
  event.chunk.emplace(std::move(entry->ready.front()));
  entry->ready.pop_front();
  if (event.chunk->transfer_complete()) Remove(n.transfer_id, entry);
  return event;
}

bool TransferTable::IsLive(const News& n) const {
  auto it = entries_.find(n.transfer_id);
  if (it == entries_.end() || it->second->generation != n.generation) return false;
  const Entry& e = *it->second;
  if (n.failure) return !e.status.ok();
  // Ready chunks leave only from the front (or all at once, on failure), in arrival order.
  return e.status.ok() && !e.ready.empty() && e.ready.front().arrival_sequence() <= n.arrival;
}

void TransferTable::Publish(News n) {
  news_.push_back(n);
  if (news_.size() < sweep_at_) return;
  size_t kept = 0;
  for (size_t i = 0; i < news_.size(); ++i) {
    if (IsLive(news_[i])) news_[kept++] = news_[i];
  }
  news_.resize(kept);
  sweep_at_ = std::max(kMinSweep, 2 * kept);
}

void TransferTable::PublishFailure(uint64_t id, const Entry& e) {
  Publish({id, e.generation, /*failure=*/true, 0});
}

void TransferTable::Remove(uint64_t id, const std::shared_ptr<Entry>& entry) {
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second == entry) entries_.erase(it);
  entry->removed = true;
}

size_t TransferTable::size() const {
  internal::MutexLock lock(&mu_);
  return entries_.size();
}

size_t TransferTable::queued_news() const {
  internal::MutexLock lock(&mu_);
  return news_.size();
}

}  // namespace kvt::transport
