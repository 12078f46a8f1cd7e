// Link-level control messages (not chunks): hello, credit, heartbeat, abort, acknowledgement.
// Layout (kControlMessageBytes = 24, little-endian): u32 magic "KVTM", u8 version (1), u8 type, u16 0, u64 a, u64 b.
//   kHello: a = receive buffer the sender may fill (bytes)      kCredit: a = bytes consumed by the receiver
//   kPing:  (nothing)                                           kAbort:  a = transfer id, b = absl::StatusCode
//   kAck:   a = transfer id: every byte of it arrived and passed its checks
//   kGoodbye: b = kGoodbyeAnnounce (the sender is shutting down) or kGoodbyeAnswer (heard; the link is down here)
// Pure functions, thread-safe.
#ifndef KVT_TRANSPORT_INTERNAL_CONTROL_MESSAGE_H_
#define KVT_TRANSPORT_INTERNAL_CONTROL_MESSAGE_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvt::transport::internal {

inline constexpr size_t kControlMessageBytes = 24;

// kGoodbye: the sender is shutting down and closes the link next, so the peer can tell an orderly close from a lost
// link (its transfers on the link fail the same way, UNAVAILABLE, but the close is not logged as a failure). The
// peer answers before taking the link down, and the shutting side waits (bounded) for the answer before it closes
// its endpoints: otherwise an endpoint error from the close could reach the peer before the announcement did (the
// rails' events are not ordered with each other), and the peer would report a lost link instead.
enum class ControlType : uint8_t { kHello = 1, kCredit = 2, kPing = 3, kAbort = 4, kAck = 5, kGoodbye = 6 };
inline constexpr uint64_t kGoodbyeAnnounce = 0;
inline constexpr uint64_t kGoodbyeAnswer = 1;

struct ControlMessage {
  ControlType type = ControlType::kPing;
  uint64_t a = 0;
  uint64_t b = 0;
};

std::array<uint8_t, kControlMessageBytes> EncodeControlMessage(const ControlMessage& m);
// INVALID_ARGUMENT for a wrong size, magic, version or type.
absl::StatusOr<ControlMessage> DecodeControlMessage(absl::Span<const uint8_t> bytes);

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_CONTROL_MESSAGE_H_
