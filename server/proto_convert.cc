#include "server/proto_convert.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvt::server {

absl::StatusOr<codec::Scheme> SchemeFromProto(const v1::SchemeSpec& proto) {
  if (proto.name().empty()) return absl::InvalidArgumentError("scheme.name is empty; e.g. \"lynx\" or \"int8\"");
  absl::StatusOr<codec::Scheme> scheme = codec::ParseScheme(proto.name());
  if (!scheme.ok()) return absl::InvalidArgumentError(absl::StrCat("scheme.name: ", scheme.status().message()));
  return scheme;
}

v1::TransferEvent EventToProto(const RequestEvent& e) {
  v1::TransferEvent p;
  switch (e.kind) {
    case EventKind::kAnchorReady:
      p.set_kind(v1::TransferEvent::ANCHOR_READY);
      break;
    case EventKind::kFullReady:
      p.set_kind(v1::TransferEvent::FULL_READY);
      break;
    case EventKind::kDone:
      p.set_kind(v1::TransferEvent::DONE);
      break;
    case EventKind::kFailed:
      p.set_kind(v1::TransferEvent::FAILED);
      break;
  }
  p.set_layer(e.layer);
  p.set_at_us(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(e.at))));
  p.set_status_code(static_cast<int32_t>(e.status.code()));
  p.set_message(std::string(e.status.message()));
  return p;
}

}  // namespace kvt::server
