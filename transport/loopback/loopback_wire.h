// A Wire over in-process queues. Each wire has a mailbox; sending copies the message into the peer's mailbox and
// wakes its engine. Links are opened by address through a process-wide registry. Used by the loopback transport.
// Like every Wire: used only on its engine's progress thread; mailboxes are shared and locked.
#ifndef KVT_TRANSPORT_LOOPBACK_LOOPBACK_WIRE_H_
#define KVT_TRANSPORT_LOOPBACK_LOOPBACK_WIRE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "transport/internal/wire.h"

namespace kvt::transport::internal {

class LoopbackMailbox;

class LoopbackWire final : public Wire {
 public:
  LoopbackWire(WireEvents* events, std::function<void()> wake);
  ~LoopbackWire() override;

  std::string address() const override { return address_; }
  absl::StatusOr<LinkId> Connect(const std::string& address) override;
  absl::Status Send(LinkId link, MessageKind kind, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, uint64_t cookie) override;
  void Close(LinkId link) override;
  int Progress() override;
  absl::Duration idle_poll_interval() const override { return absl::Milliseconds(50); }

 private:
  struct Remote {
    std::shared_ptr<LoopbackMailbox> mailbox;
    LinkId link = 0;  // the id the peer uses for this link
    bool up = false;
  };

  WireEvents* const events_;
  std::shared_ptr<LoopbackMailbox> mailbox_;
  std::string address_;
  LinkId next_link_ = 1;
  absl::flat_hash_map<LinkId, Remote> remotes_;
  std::vector<std::pair<uint64_t, absl::Status>> completions_;
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_LOOPBACK_LOOPBACK_WIRE_H_
