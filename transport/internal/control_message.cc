#include "transport/internal/control_message.h"

#include <cstring>

#include "absl/status/status.h"

namespace kvt::transport::internal {
namespace {
constexpr uint32_t kMagic = 0x4D54564Bu;  // "KVTM"
constexpr uint8_t kVersion = 1;
}  // namespace

std::array<uint8_t, kControlMessageBytes> EncodeControlMessage(const ControlMessage& m) {
  std::array<uint8_t, kControlMessageBytes> out{};
  std::memcpy(out.data(), &kMagic, 4);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(m.type);
  std::memcpy(out.data() + 8, &m.a, 8);
  std::memcpy(out.data() + 16, &m.b, 8);
  return out;
}

absl::StatusOr<ControlMessage> DecodeControlMessage(absl::Span<const uint8_t> bytes) {
  if (bytes.size() != kControlMessageBytes) return absl::InvalidArgumentError("control message has a bad size");
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), 4);
  if (magic != kMagic || bytes[4] != kVersion || bytes[6] != 0 || bytes[7] != 0) {
    return absl::InvalidArgumentError("control message has a bad magic or version");
  }
  ControlMessage m;
  const uint8_t type = bytes[5];
  if (type < static_cast<uint8_t>(ControlType::kHello) || type > static_cast<uint8_t>(ControlType::kGoodbye)) {
    return absl::InvalidArgumentError("control message has an unknown type");
  }
  m.type = static_cast<ControlType>(type);
  std::memcpy(&m.a, bytes.data() + 8, 8);
  std::memcpy(&m.b, bytes.data() + 16, 8);
  return m;
}

}  // namespace kvt::transport::internal
