#include "transport/loopback/loopback_wire.h"

#include <cstring>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "transport/internal/mutex.h"

namespace kvt::transport::internal {

namespace {

enum class EventType { kConnect, kAccept, kMessage, kDown };

struct Event {
  EventType type = EventType::kMessage;
  LinkId link = 0;         // the receiving wire's id for the link (kAccept, kMessage, kDown)
  LinkId remote_link = 0;  // the sending wire's id for it (kConnect, kAccept)
  std::shared_ptr<LoopbackMailbox> from;  // kConnect
  MessageKind kind = MessageKind::kControl;
  std::vector<uint8_t> header;
  std::vector<uint8_t> payload;
};

class VectorPayload final : public InboundPayload {
 public:
  explicit VectorPayload(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  size_t length() const override { return bytes_.size(); }
  absl::StatusOr<bool> ReadInto(uint8_t* dest, uint64_t /*cookie*/) override {
    if (!bytes_.empty()) std::memcpy(dest, bytes_.data(), bytes_.size());
    return true;
  }

 private:
  const std::vector<uint8_t>& bytes_;
};

}  // namespace

// One wire's inbox. Shared by the owning wire and every peer that holds a link to it.
class LoopbackMailbox {
 public:
  explicit LoopbackMailbox(std::function<void()> wake) : wake_(std::move(wake)) {}

  // Returns false (and drops the event) once the owner is gone.
  bool Push(Event e) {
    internal::MutexLock lock(&mu_);
    if (closed_) return false;
    events_.push_back(std::move(e));
    wake_();  // under mu_: the owner cannot be destroyed meanwhile (Close takes mu_)
    return true;
  }
  std::deque<Event> TakeAll() {
    internal::MutexLock lock(&mu_);
    std::deque<Event> out;
    out.swap(events_);
    return out;
  }
  void Close() {
    internal::MutexLock lock(&mu_);
    closed_ = true;
    events_.clear();
    wake_ = [] {};
  }

 private:
  internal::Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> wake_ ABSL_GUARDED_BY(mu_);
};

namespace {

// Process-wide address book of live loopback wires.
class Registry {
 public:
  static Registry& Get() {
    static Registry* const r = new Registry();
    return *r;
  }
  std::string Add(std::shared_ptr<LoopbackMailbox> mailbox) {
    internal::MutexLock lock(&mu_);
    const uint64_t n = next_++;
    boxes_[n] = std::move(mailbox);
    return absl::StrCat("loopback:", n);
  }
  void Remove(const std::string& address) {
    uint64_t n;
    if (!Parse(address, &n)) return;
    internal::MutexLock lock(&mu_);
    boxes_.erase(n);
  }
  std::shared_ptr<LoopbackMailbox> Find(uint64_t n) {
    internal::MutexLock lock(&mu_);
    auto it = boxes_.find(n);
    return it == boxes_.end() ? nullptr : it->second;
  }
  static bool Parse(const std::string& address, uint64_t* n) {
    return absl::StartsWith(address, "loopback:") && absl::SimpleAtoi(address.substr(9), n);
  }

 private:
  internal::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<LoopbackMailbox>> boxes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

LoopbackWire::LoopbackWire(WireEvents* events, std::function<void()> wake)
    : events_(events), mailbox_(std::make_shared<LoopbackMailbox>(std::move(wake))) {
  address_ = Registry::Get().Add(mailbox_);
}

LoopbackWire::~LoopbackWire() {
  Registry::Get().Remove(address_);
  mailbox_->Close();
  for (auto& [id, remote] : remotes_) {
    Event e;
    e.type = EventType::kDown;
    e.link = remote.link;
    remote.mailbox->Push(std::move(e));
  }
}

absl::StatusOr<LinkId> LoopbackWire::Connect(const std::string& address) {
  uint64_t n;
  if (!Registry::Parse(address, &n)) {
    return absl::InvalidArgumentError(absl::StrCat("not a loopback address: ", address));
  }
  std::shared_ptr<LoopbackMailbox> peer = Registry::Get().Find(n);
  if (peer == nullptr) return absl::UnavailableError(absl::StrCat("nothing listens at ", address));
  const LinkId id = next_link_++;
  Event e;
  e.type = EventType::kConnect;
  e.remote_link = id;
  e.from = mailbox_;
  if (!peer->Push(std::move(e))) return absl::UnavailableError(absl::StrCat("nothing listens at ", address));
  remotes_[id] = Remote{peer, 0, false};
  return id;
}

absl::Status LoopbackWire::Send(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                                absl::Span<const uint8_t> payload, uint64_t cookie) {
  auto it = remotes_.find(link);
  if (it == remotes_.end() || !it->second.up) return absl::FailedPreconditionError("link is not up");
  Event e;
  e.type = EventType::kMessage;
  e.link = it->second.link;
  e.kind = kind;
  e.header.assign(header.begin(), header.end());
  e.payload.assign(payload.begin(), payload.end());
  const bool delivered = it->second.mailbox->Push(std::move(e));
  completions_.emplace_back(cookie, delivered ? absl::OkStatus() : absl::UnavailableError("peer is gone"));
  return absl::OkStatus();
}

void LoopbackWire::Close(LinkId link) {
  auto it = remotes_.find(link);
  if (it == remotes_.end()) return;
  if (it->second.up) {
    Event e;
    e.type = EventType::kDown;
    e.link = it->second.link;
    it->second.mailbox->Push(std::move(e));
  }
  remotes_.erase(it);
}

int LoopbackWire::Progress() {
  int work = 0;
  std::vector<std::pair<uint64_t, absl::Status>> done;
  done.swap(completions_);
  for (auto& [cookie, status] : done) events_->OnSendDone(cookie, status);
  work += static_cast<int>(done.size());
  std::deque<Event> events = mailbox_->TakeAll();
  for (Event& e : events) {
    ++work;
    switch (e.type) {
      case EventType::kConnect: {
        const LinkId id = next_link_++;
        remotes_[id] = Remote{e.from, e.remote_link, true};
        Event accept;
        accept.type = EventType::kAccept;
        accept.link = e.remote_link;
        accept.remote_link = id;
        if (e.from->Push(std::move(accept))) {
          events_->OnLinkUp(id, /*inbound=*/true);
        } else {
          remotes_.erase(id);
        }
        break;
      }
      case EventType::kAccept: {
        auto it = remotes_.find(e.link);
        if (it == remotes_.end()) break;  // closed meanwhile
        it->second.link = e.remote_link;
        it->second.up = true;
        events_->OnLinkUp(e.link, /*inbound=*/false);
        break;
      }
      case EventType::kMessage: {
        if (!remotes_.contains(e.link)) break;
        VectorPayload payload(e.payload);
        events_->OnMessage(e.link, e.kind, e.header, payload);
        break;
      }
      case EventType::kDown: {
        auto it = remotes_.find(e.link);
        if (it == remotes_.end()) break;
        remotes_.erase(it);
        events_->OnLinkDown(e.link, absl::UnavailableError("loopback peer closed the link"));
        break;
      }
    }
  }
  return work;
}

}  // namespace kvt::transport::internal
