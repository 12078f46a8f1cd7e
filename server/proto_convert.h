// Conversions between the kvt.v1 protos and the daemon's validated types, at the service edge.
#ifndef KVT_SERVER_PROTO_CONVERT_H_
#define KVT_SERVER_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "codec/scheme.h"
#include "proto/kvt/v1/client.pb.h"
#include "proto/kvt/v1/layout.pb.h"
#include "server/kv_layout.h"
#include "server/request_book.h"

namespace kvt::server {

// INVALID_ARGUMENT for an unspecified or unknown dtype or block order (other fields are checked by
// KvLayout::Create against the region).
absl::StatusOr<KvLayoutSpec> LayoutFromProto(const v1::KvLayout& proto);
v1::KvLayout LayoutToProto(const KvLayoutSpec& spec);

// INVALID_ARGUMENT listing the valid forms for an unknown scheme name.
absl::StatusOr<codec::Scheme> SchemeFromProto(const v1::SchemeSpec& proto);

v1::TransferEvent EventToProto(const RequestEvent& event);

}  // namespace kvt::server

#endif  // KVT_SERVER_PROTO_CONVERT_H_
