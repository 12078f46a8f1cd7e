#include "transport/ucx/ucx_wire.h"

#include <cstring>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace kvt::transport::internal {
namespace {

constexpr char kAddressPrefix[] = "ucx:";
constexpr char kRailSeparator = '.';
// Events reported per Progress call. With one rail, driven inline, a small batch lets UCX move the next payloads
// between reports; rails with threads of their own move them meanwhile.
constexpr int kInlineEventsPerProgress = 4;
constexpr int kThreadedEventsPerProgress = 64;
// Largest worker address a connect message may carry (UCX's are a few hundred bytes at most).
constexpr uint32_t kMaxWorkerAddressBytes = 16 << 10;

// Connect payload: u32 n, then n times (u32 length, worker address bytes). Little-endian, as every kvt header.
std::string EncodeConnectPayload(const std::vector<std::string>& addresses) {
  std::string out;
  auto put32 = [&out](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<uint32_t>(addresses.size()));
  for (const std::string& a : addresses) {
    put32(static_cast<uint32_t>(a.size()));
    out += a;
  }
  return out;
}

// INVALID_ARGUMENT unless `bytes` is exactly a connect payload of 1..max_rails addresses.
absl::StatusOr<std::vector<std::string>> DecodeConnectPayload(absl::Span<const uint8_t> bytes, int max_rails) {
  size_t at = 0;
  auto get32 = [&](uint32_t* v) {
    if (bytes.size() - at < 4) return false;
    std::memcpy(v, bytes.data() + at, 4);
    at += 4;
    return true;
  };
  uint32_t n = 0;
  if (!get32(&n)) return absl::InvalidArgumentError("connect message is shorter than its rail count");
  if (n == 0 || n > static_cast<uint32_t>(max_rails)) {
    return absl::InvalidArgumentError(absl::StrCat("connect message names ", n, " rails; this side has ", max_rails));
  }
  std::vector<std::string> addresses;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t length = 0;
    if (!get32(&length) || length == 0 || length > kMaxWorkerAddressBytes || bytes.size() - at < length) {
      return absl::InvalidArgumentError("connect message is truncated or has a bad worker address length");
    }
    addresses.emplace_back(reinterpret_cast<const char*>(bytes.data() + at), length);
    at += length;
  }
  if (at != bytes.size()) return absl::InvalidArgumentError("connect message has trailing bytes");
  return addresses;
}

// The worker addresses in a "ucx:" address, one per rail.
absl::StatusOr<std::vector<std::string>> ParseAddress(const std::string& address) {
  auto bad = [&address]() {
    return absl::InvalidArgumentError(absl::StrCat("not a UCX worker address: \"", address.substr(0, 40), "\""));
  };
  if (!absl::StartsWith(address, kAddressPrefix)) return bad();
  std::vector<std::string> out;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(address).substr(sizeof(kAddressPrefix) - 1), kRailSeparator)) {
    if (part.empty() || part.size() % 2 != 0 || part.find_first_not_of("0123456789abcdefABCDEF") != part.npos) {
      return bad();
    }
    out.push_back(absl::HexStringToBytes(part));
  }
  if (out.size() > static_cast<size_t>(kMaxUcxRails)) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX address lists ", out.size(), " rails; at most ", kMaxUcxRails, " are supported"));
  }
  return out;
}

}  // namespace

// The payload of a message being reported, valid during its OnMessage call only.
class UcxWire::Payload final : public InboundPayload {
 public:
  Payload(UcxRail* rail, RailEvent& event) : rail_(rail), event_(event) {}
  size_t length() const override { return event_.length; }
  absl::StatusOr<bool> ReadInto(uint8_t* dest, uint64_t cookie) override {
    if (read_) return absl::FailedPreconditionError("payload already read");
    read_ = true;
    if (event_.rendezvous == nullptr) {
      if (!event_.data.empty()) std::memcpy(dest, event_.data.data(), event_.data.size());
      return true;
    }
    rail_->Receive(event_.rendezvous, dest, event_.length, cookie);
    event_.rendezvous = nullptr;  // the rail owns it now
    return false;
  }

 private:
  UcxRail* rail_;
  RailEvent& event_;
  bool read_ = false;
};

absl::StatusOr<std::unique_ptr<UcxWire>> UcxWire::Create(const Options& options, WireEvents* events,
                                                         std::function<void()> wake) {
  KVT_RETURN_IF_ERROR(ValidateOptions(options).status());
  std::unique_ptr<UcxWire> wire(new UcxWire(events, std::move(wake)));
  std::vector<std::string> hex;
  for (int i = 0; i < options.ucx_workers; ++i) {
    KVT_ASSIGN_OR_RETURN(std::unique_ptr<UcxRail> rail, UcxRail::Create(i, options, wire.get()));
    hex.push_back(absl::BytesToHexString(rail->worker_address()));
    wire->rails_.push_back(std::move(rail));
  }
  wire->rail_bytes_in_flight_.assign(wire->rails_.size(), 0);
  wire->address_ = absl::StrCat(kAddressPrefix, absl::StrJoin(hex, std::string(1, kRailSeparator)));
  wire->threaded_ = wire->rails_.size() > 1;
  if (wire->threaded_) {
    for (auto& rail : wire->rails_) rail->Start();
  }
  return wire;
}

UcxWire::~UcxWire() {
  for (auto& rail : rails_) rail->Stop(UcxRail::kDefaultStopLimit);
  // Events still queued may name rendezvous descriptors; they died with their workers.
}

void UcxWire::Post(RailEvent event) {
  {
    internal::MutexLock lock(&mu_);
    queue_.push_back(std::move(event));
  }
  if (threaded_ && wake_) wake_();
}

UcxWire::Link* UcxWire::FindLink(LinkId id) {
  auto it = links_.find(id);
  return it == links_.end() ? nullptr : it->second.get();
}

LinkId UcxWire::AddLink(uint64_t token, std::vector<std::string> remote) {
  auto link = std::make_unique<Link>();
  link->id = next_link_++;
  link->token = token;
  link->rails = static_cast<int>(remote.size());
  for (int i = 0; i < link->rails; ++i) rails_[i]->Open(token, std::move(remote[i]));
  const LinkId id = link->id;
  by_token_[token] = id;
  links_[id] = std::move(link);
  return id;
}

int UcxWire::link_rails(LinkId id) const {
  auto it = links_.find(id);
  return it == links_.end() ? 0 : it->second->rails;
}

absl::StatusOr<LinkId> UcxWire::Connect(const std::string& address) {
  KVT_ASSIGN_OR_RETURN(std::vector<std::string> remote, ParseAddress(address));
  const int n = std::min<int>(static_cast<int>(remote.size()), rail_count());
  uint64_t token = 0;
  absl::BitGen gen;
  while (token == 0 || by_token_.contains(token)) token = absl::Uniform<uint64_t>(gen);
  remote.resize(n);
  std::vector<std::string> own;
  for (int i = 0; i < n; ++i) own.push_back(rails_[i]->worker_address());
  const LinkId id = AddLink(token, std::move(remote));
  // Tell the peer who we are; UCX queues it (and everything after it) until the endpoint is wired up.
  rails_[0]->SendOwned(token, kConnectAmId, EncodeConnectPayload(own));
  outbound_up_.push_back(id);
  return id;
}

int UcxWire::PickRail(const Link& link) const {
  int best = 0;
  for (int i = 1; i < link.rails; ++i) {
    if (rail_bytes_in_flight_[i] < rail_bytes_in_flight_[best]) best = i;
  }
  return best;
}

absl::Status UcxWire::Send(LinkId id, MessageKind kind, absl::Span<const uint8_t> header,
                           absl::Span<const uint8_t> payload, uint64_t cookie) {
  Link* link = FindLink(id);
  if (link == nullptr) return absl::FailedPreconditionError("link is closed");
  if (header.size() + kTokenBytes > kMaxAmHeaderBytes) return absl::InvalidArgumentError("message header too large");
  if (sends_.contains(cookie)) return absl::InvalidArgumentError("cookie already in use");
  const int rail = kind == MessageKind::kChunk ? PickRail(*link) : 0;
  sends_[cookie] = SendRecord{rail, payload.size()};
  rail_bytes_in_flight_[rail] += payload.size();
  rails_[rail]->Send(link->token, kind == MessageKind::kChunk ? kChunkAmId : kControlAmId, header, payload, cookie);
  return absl::OkStatus();
}

void UcxWire::CloseLink(LinkId id) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  by_token_.erase(it->second->token);
  for (int i = 0; i < it->second->rails; ++i) rails_[i]->Close(it->second->token);
  links_.erase(it);  // its sends still report through sends_, by cookie
}

void UcxWire::Close(LinkId id) { CloseLink(id); }

void UcxWire::Drop(const RailEvent& event) {
  if (event.rendezvous != nullptr) rails_[event.rail]->Release(event.rendezvous);
}

void UcxWire::HandleConnect(RailEvent& event) {
  auto refuse = [&](const absl::Status& why) {
    Logger("transport")->warn("refused a UCX connect message on rail {}: {}", event.rail, why.ToString());
    Drop(event);
  };
  if (event.rail != 0 || event.header.size != 0 || event.rendezvous != nullptr || event.token == 0) {
    refuse(absl::InvalidArgumentError("malformed (wrong rail, header or size, or no token)"));
    return;
  }
  if (by_token_.contains(event.token)) return;  // a duplicate; the link exists
  auto addresses = DecodeConnectPayload(event.data, rail_count());
  if (!addresses.ok()) {
    refuse(addresses.status());
    return;
  }
  events_->OnLinkUp(AddLink(event.token, *std::move(addresses)), /*inbound=*/true);
}

void UcxWire::HandleMessage(RailEvent& event) {
  if (event.am_id == kConnectAmId) {
    HandleConnect(event);
    return;
  }
  // The token names the link; a message without a known one is dropped (a rendezvous payload with it).
  auto it = by_token_.find(event.token);
  Link* link = it == by_token_.end() ? nullptr : FindLink(it->second);
  if (link == nullptr || event.rail >= link->rails) {
    Drop(event);
    return;
  }
  Payload payload(rails_[event.rail].get(), event);
  events_->OnMessage(link->id, event.am_id == kChunkAmId ? MessageKind::kChunk : MessageKind::kControl,
                     event.header.span(), payload);
  Drop(event);  // a rendezvous payload the engine did not read (ReadInto cleared it if it did)
}

void UcxWire::HandleEvent(RailEvent& event) {
  switch (event.type) {
    case RailEvent::Type::kMessage:
      HandleMessage(event);
      break;
    case RailEvent::Type::kSendDone: {
      auto it = sends_.find(event.cookie);
      if (it == sends_.end()) break;
      rail_bytes_in_flight_[it->second.rail] -= it->second.bytes;
      sends_.erase(it);
      events_->OnSendDone(event.cookie, event.status);
      break;
    }
    case RailEvent::Type::kPayloadRead:
      events_->OnPayloadRead(event.cookie, event.status);
      break;
    case RailEvent::Type::kEndpointError: {
      auto it = by_token_.find(event.token);
      if (it == by_token_.end()) break;
      const LinkId id = it->second;
      CloseLink(id);
      events_->OnLinkDown(id, event.status);
      break;
    }
  }
}

int UcxWire::Progress() {
  int work = 0;
  while (!outbound_up_.empty()) {
    const LinkId id = outbound_up_.front();
    outbound_up_.pop_front();
    ++work;
    if (FindLink(id) != nullptr) events_->OnLinkUp(id, /*inbound=*/false);
  }
  if (!threaded_) work += rails_[0]->Drive();
  // Report a bounded batch of what the rails queued (the rest next call); reporting may queue more.
  const int limit = threaded_ ? kThreadedEventsPerProgress : kInlineEventsPerProgress;
  std::deque<RailEvent> batch;
  {
    internal::MutexLock lock(&mu_);
    while (!queue_.empty() && static_cast<int>(batch.size()) < limit) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  for (RailEvent& event : batch) {
    HandleEvent(event);
    ++work;
  }
  return work;
}

}  // namespace kvt::transport::internal
