// UcxWire on its own (no engine): the connect protocol between wires of different rail counts, striping of chunks
// over rails, control messages in order on rail 0, unread rendezvous payloads, and hostile connect messages.
// The engine-level contracts (lanes, credit, failures) over several rails are in transport_conformance_test.
#include "transport/ucx/ucx_wire.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "transport/options.h"
#include "transport/ucx/ucx_rail.h"

namespace kvt::transport::internal {
namespace {

constexpr absl::Duration kDeadline = absl::Seconds(20);

// Records what a wire reports. Reads every chunk payload into a buffer of its own unless told to leave them.
class Recorder : public WireEvents {
 public:
  struct Message {
    LinkId link = 0;
    MessageKind kind = MessageKind::kControl;
    std::vector<uint8_t> header;
    std::vector<uint8_t> payload;
    bool complete = false;
  };

  void OnLinkUp(LinkId link, bool inbound) override { up.push_back({link, inbound}); }
  void OnLinkDown(LinkId link, absl::Status status) override { down.push_back({link, status}); }
  void OnMessage(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                 InboundPayload& payload) override {
    Message m;
    m.link = link;
    m.kind = kind;
    m.header.assign(header.begin(), header.end());
    m.payload.resize(payload.length());
    messages.push_back(std::move(m));
    if (!read_payloads) return;
    const uint64_t cookie = next_cookie++;
    auto done = payload.ReadInto(messages.back().payload.data(), cookie);
    ASSERT_TRUE(done.ok()) << done.status();
    if (*done) {
      messages.back().complete = true;
    } else {
      reading[cookie] = messages.size() - 1;
    }
  }
  void OnPayloadRead(uint64_t cookie, absl::Status status) override {
    auto it = reading.find(cookie);
    ASSERT_NE(it, reading.end()) << "payload read reported for unknown cookie " << cookie;
    EXPECT_TRUE(status.ok()) << status;
    messages[it->second].complete = true;
    reading.erase(it);
  }
  void OnSendDone(uint64_t cookie, absl::Status status) override { sent.push_back({cookie, status}); }

  int complete_messages() const {
    int n = 0;
    for (const Message& m : messages) n += m.complete ? 1 : 0;
    return n;
  }

  bool read_payloads = true;
  std::vector<std::pair<LinkId, bool>> up;
  std::vector<std::pair<LinkId, absl::Status>> down;
  std::vector<Message> messages;
  std::vector<std::pair<uint64_t, absl::Status>> sent;
  absl::flat_hash_map<uint64_t, size_t> reading;
  uint64_t next_cookie = 1;
};

Options WireOptions(int workers) {
  Options o;
  o.ucx_tls = "tcp";
  o.ucx_net_devices = "lo";
  o.ucx_workers = workers;
  return o;
}

struct Side {
  Recorder events;
  std::unique_ptr<UcxWire> wire;
};

std::unique_ptr<Side> MakeSide(int workers) {
  auto side = std::make_unique<Side>();
  auto wire = UcxWire::Create(WireOptions(workers), &side->events);
  EXPECT_TRUE(wire.ok()) << wire.status();
  if (wire.ok()) side->wire = *std::move(wire);
  return side;
}

// Progresses both wires until `done` holds; false at the deadline.
bool PumpUntil(Side& a, Side& b, const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + kDeadline;
  while (absl::Now() < give_up) {
    if (done()) return true;
    if (a.wire->Progress() + b.wire->Progress() == 0) absl::SleepFor(absl::Microseconds(50));
  }
  return done();
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 11));
  return v;
}

// Connects a to b and waits until both sides report the link up; returns a's link id and b's.
std::pair<LinkId, LinkId> Connect(Side& a, Side& b) {
  auto link = a.wire->Connect(b.wire->address());
  EXPECT_TRUE(link.ok()) << link.status();
  EXPECT_TRUE(PumpUntil(a, b, [&] { return !a.events.up.empty() && !b.events.up.empty(); }));
  if (a.events.up.empty() || b.events.up.empty()) return {0, 0};
  EXPECT_FALSE(a.events.up[0].second);
  EXPECT_TRUE(b.events.up[0].second);
  return {a.events.up[0].first, b.events.up[0].first};
}

// Two sides of `a_workers` and `b_workers` rails, a connected to b; la == 0 when that failed.
struct ConnectedPair {
  std::unique_ptr<Side> a, b;
  LinkId la = 0, lb = 0;
};

ConnectedPair MakeConnectedPair(int a_workers, int b_workers) {
  ConnectedPair p;
  p.a = MakeSide(a_workers);
  p.b = MakeSide(b_workers);
  if (p.a->wire == nullptr || p.b->wire == nullptr) return p;
  std::tie(p.la, p.lb) = Connect(*p.a, *p.b);
  return p;
}

TEST(SharedMemoryOnlyTest, NamesOnlySharedMemoryTransportLists) {
  EXPECT_TRUE(SharedMemoryOnly("shm"));
  EXPECT_TRUE(SharedMemoryOnly("sm,cma"));
  EXPECT_TRUE(SharedMemoryOnly(" posix , sysv,self "));
  EXPECT_TRUE(SharedMemoryOnly("SHM"));
  EXPECT_FALSE(SharedMemoryOnly(""));  // UCX's default: every transport, tcp included
  EXPECT_FALSE(SharedMemoryOnly("tcp"));
  EXPECT_FALSE(SharedMemoryOnly("shm,tcp"));
  EXPECT_FALSE(SharedMemoryOnly("rc,ud"));
  EXPECT_FALSE(SharedMemoryOnly("all"));
  EXPECT_FALSE(SharedMemoryOnly("^tcp"));  // everything but tcp: network transports remain
}

TEST(UcxWireTest, RefusesWorkerCountsOutOfRange) {
  Recorder events;
  for (int workers : {0, -1, kMaxUcxRails + 1}) {
    auto wire = UcxWire::Create(WireOptions(workers), &events);
    ASSERT_FALSE(wire.ok()) << workers;
    EXPECT_EQ(wire.status().code(), absl::StatusCode::kInvalidArgument) << wire.status();
  }
}

TEST(UcxWireTest, AddressListsEveryRail) {
  auto side = MakeSide(3);
  ASSERT_NE(side->wire, nullptr);
  const std::string address = side->wire->address();
  ASSERT_EQ(address.rfind("ucx:", 0), 0u) << address;
  EXPECT_EQ(std::count(address.begin(), address.end(), '.'), 2) << address;
  EXPECT_EQ(side->wire->rail_count(), 3);
}

TEST(UcxWireTest, RefusesAddressesThatAreNotUcxWorkerAddresses) {
  auto side = MakeSide(1);
  ASSERT_NE(side->wire, nullptr);
  std::string seventeen = "ucx:ab";
  for (int i = 0; i < kMaxUcxRails; ++i) absl::StrAppend(&seventeen, ".ab");
  for (const std::string& bad : {std::string(""), std::string("ucx:"), std::string("tcp:abcd"), std::string("ucx:zz"),
                                 std::string("ucx:abc"), std::string("ucx:ab."), std::string("ucx:.ab"),
                                 std::string("ucx:ab..cd"), seventeen}) {
    auto link = side->wire->Connect(bad);
    ASSERT_FALSE(link.ok()) << bad;
    EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument) << bad << ": " << link.status();
  }
}

// A link between wires of 3 and 2 rails uses 2 on both sides; chunks spread over both, arrive whole, and rail 2
// stays unused.
TEST(UcxWireTest, StripesChunksOverTheRailsBothSidesHave) {
  ConnectedPair pair = MakeConnectedPair(3, 2);
  ASSERT_NE(pair.la, 0u);
  Side* a = pair.a.get();
  Side* b = pair.b.get();
  const LinkId la = pair.la, lb = pair.lb;
  EXPECT_EQ(a->wire->link_rails(la), 2);
  EXPECT_EQ(b->wire->link_rails(lb), 2);

  constexpr int kChunks = 48;
  constexpr size_t kChunkBytes = 256 << 10;  // large enough for UCX rendezvous
  std::vector<std::vector<uint8_t>> payloads;
  for (int i = 0; i < kChunks; ++i) payloads.push_back(Pattern(kChunkBytes, static_cast<uint8_t>(i)));
  for (int i = 0; i < kChunks; ++i) {
    const uint8_t header[4] = {static_cast<uint8_t>(i), 0xC, 0xD, 0xE};
    ASSERT_TRUE(a->wire->Send(la, MessageKind::kChunk, header, payloads[i], 1000 + i).ok());
  }
  ASSERT_TRUE(PumpUntil(*a, *b, [&] {
    return b->events.complete_messages() == kChunks && static_cast<int>(a->events.sent.size()) == kChunks;
  })) << b->events.complete_messages() << " of " << kChunks << " chunks arrived, " << a->events.sent.size()
      << " sends done";
  std::vector<bool> seen(kChunks, false);
  for (const Recorder::Message& m : b->events.messages) {
    ASSERT_EQ(m.kind, MessageKind::kChunk);
    ASSERT_EQ(m.link, lb);
    ASSERT_EQ(m.header.size(), 4u);
    const int i = m.header[0];
    ASSERT_LT(i, kChunks);
    EXPECT_FALSE(seen[i]) << "chunk " << i << " arrived twice";
    seen[i] = true;
    EXPECT_EQ(m.payload, payloads[i]) << "chunk " << i << " corrupted";
  }
  for (const auto& [cookie, status] : a->events.sent) EXPECT_TRUE(status.ok()) << cookie << ": " << status;
  EXPECT_GT(a->wire->rail(0).payload_bytes_sent(), 0u);
  EXPECT_GT(a->wire->rail(1).payload_bytes_sent(), 0u);
  EXPECT_EQ(a->wire->rail(2).messages_sent(), 0u);
  // Rail 0 also carried the connect message: a count, then a length and a worker address per rail of the link.
  const uint64_t connect_bytes =
      4 + (4 + a->wire->rail(0).worker_address().size()) + (4 + a->wire->rail(1).worker_address().size());
  EXPECT_EQ(a->wire->rail(0).payload_bytes_sent() + a->wire->rail(1).payload_bytes_sent(),
            kChunks * kChunkBytes + connect_bytes);
}

// Control messages all take rail 0, so they arrive in the order they were sent, in both directions.
TEST(UcxWireTest, ControlMessagesArriveInOrderOnEveryRailCount) {
  ConnectedPair pair = MakeConnectedPair(2, 2);
  ASSERT_NE(pair.la, 0u);
  Side* a = pair.a.get();
  Side* b = pair.b.get();
  const LinkId la = pair.la, lb = pair.lb;
  constexpr int kMessages = 200;
  for (int i = 0; i < kMessages; ++i) {
    uint8_t header[8];
    const uint64_t seq = i;
    std::memcpy(header, &seq, 8);
    ASSERT_TRUE(a->wire->Send(la, MessageKind::kControl, header, {}, i + 1).ok());
    ASSERT_TRUE(b->wire->Send(lb, MessageKind::kControl, header, {}, i + 1).ok());
  }
  ASSERT_TRUE(PumpUntil(*a, *b, [&] {
    return static_cast<int>(a->events.messages.size()) == kMessages &&
           static_cast<int>(b->events.messages.size()) == kMessages;
  }));
  for (Side* side : {a, b}) {
    for (int i = 0; i < kMessages; ++i) {
      const Recorder::Message& m = side->events.messages[i];
      ASSERT_EQ(m.kind, MessageKind::kControl);
      uint64_t seq = 0;
      ASSERT_EQ(m.header.size(), 8u);
      std::memcpy(&seq, m.header.data(), 8);
      ASSERT_EQ(seq, static_cast<uint64_t>(i)) << "control message out of order";
    }
  }
  EXPECT_EQ(a->wire->rail(1).messages_sent(), 0u);
  EXPECT_EQ(b->wire->rail(1).messages_sent(), 0u);
}

// A receiver that leaves rendezvous payloads unread (an engine dropping chunks) releases them: the sends complete
// and the link goes on carrying chunks that are read.
TEST(UcxWireTest, UnreadRendezvousPayloadsAreReleased) {
  ConnectedPair pair = MakeConnectedPair(2, 2);
  ASSERT_NE(pair.la, 0u);
  Side* a = pair.a.get();
  Side* b = pair.b.get();
  const LinkId la = pair.la;
  const std::vector<uint8_t> payload = Pattern(512 << 10, 7);
  const uint8_t header[2] = {1, 2};
  b->events.read_payloads = false;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(a->wire->Send(la, MessageKind::kChunk, header, payload, i + 1).ok());
  ASSERT_TRUE(PumpUntil(*a, *b, [&] { return a->events.sent.size() == 8 && b->events.messages.size() == 8; }));
  b->events.read_payloads = true;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(a->wire->Send(la, MessageKind::kChunk, header, payload, 100 + i).ok());
  ASSERT_TRUE(PumpUntil(*a, *b, [&] { return b->events.complete_messages() == 8 && a->events.sent.size() == 16; }));
  for (const Recorder::Message& m : b->events.messages) {
    if (m.complete) {
      EXPECT_EQ(m.payload, payload);
    }
  }
}

// A link closed on one side: sends on it fail at once; the rails keep serving other links.
TEST(UcxWireTest, ClosedLinkRefusesSendsAndOthersGoOn) {
  ConnectedPair pair = MakeConnectedPair(2, 2);
  ASSERT_NE(pair.la, 0u);
  Side* a = pair.a.get();
  Side* b = pair.b.get();
  const LinkId la = pair.la;
  a->wire->Close(la);
  const uint8_t header[1] = {9};
  auto refused = a->wire->Send(la, MessageKind::kChunk, header, {}, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  auto link2 = a->wire->Connect(b->wire->address());
  ASSERT_TRUE(link2.ok()) << link2.status();
  ASSERT_TRUE(PumpUntil(*a, *b, [&] { return a->events.up.size() == 2 && b->events.up.size() == 2; }));
  const std::vector<uint8_t> payload = Pattern(300 << 10, 3);
  ASSERT_TRUE(a->wire->Send(*link2, MessageKind::kChunk, header, payload, 2).ok());
  ASSERT_TRUE(PumpUntil(*a, *b, [&] { return b->events.complete_messages() == 1; }));
  EXPECT_EQ(b->events.messages[0].link, b->events.up[1].first);
  EXPECT_EQ(b->events.messages[0].payload, payload);
}

// Connect messages that are not what a kvt wire sends are refused without a link, and a real one still works.
class NullSink : public RailEventSink {
 public:
  void Post(RailEvent event) override {
    if (event.type == RailEvent::Type::kSendDone) ++sends_done;
  }
  int sends_done = 0;
};

TEST(UcxWireTest, RefusesHostileConnectMessages) {
  auto b = MakeSide(2);
  ASSERT_NE(b->wire, nullptr);
  NullSink sink;
  auto hostile = UcxRail::Create(0, WireOptions(1), &sink);
  ASSERT_TRUE(hostile.ok()) << hostile.status();
  // b's rail 0 address is the first of its list.
  const std::string address = b->wire->address();
  const std::string rail0 = absl::HexStringToBytes(address.substr(4, address.find('.') - 4));
  const std::string own = (*hostile)->worker_address();
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  const std::vector<std::string> bad = {
      "",                                                  // empty
      u32(0),                                              // no rails
      u32(3) + u32(own.size()) + own,                      // more rails than b has
      u32(1) + u32(own.size() + 10) + own,                 // length past the end
      u32(1) + u32(0),                                     // empty address
      u32(1) + u32(own.size()) + own + "trailing",         // trailing bytes
      u32(1) + u32(own.size()) + own,                      // valid payload, but sent on a token of 0 (below)
  };
  std::vector<std::string> payloads(bad.begin(), bad.end());
  uint64_t token = 77;
  for (size_t i = 0; i < payloads.size(); ++i) {
    const uint64_t t = i + 1 == payloads.size() ? 0 : token++;
    (*hostile)->Open(t, rail0);
    (*hostile)->Send(t, kConnectAmId, {},
                     absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(payloads[i].data()), payloads[i].size()),
                     i + 1);
  }
  const absl::Time give_up = absl::Now() + kDeadline;
  while (sink.sends_done < static_cast<int>(payloads.size()) && absl::Now() < give_up) {
    (*hostile)->Drive();
    b->wire->Progress();
  }
  ASSERT_EQ(sink.sends_done, static_cast<int>(payloads.size()));
  for (int i = 0; i < 200; ++i) {
    (*hostile)->Drive();
    b->wire->Progress();
  }
  EXPECT_TRUE(b->events.up.empty()) << "a hostile connect message made a link";
  // A well-formed connect from a real wire still works.
  auto a = MakeSide(1);
  ASSERT_NE(a->wire, nullptr);
  auto [la, lb] = Connect(*a, *b);
  EXPECT_NE(la, 0u);
  EXPECT_EQ(b->wire->link_rails(lb), 1);
  (*hostile)->Stop(absl::Seconds(1));
}

}  // namespace
}  // namespace kvt::transport::internal
