// Conversions between the kvt.v1 protos and the daemon's validated types, at the service edge.
#ifndef KVT_SERVER_PROTO_CONVERT_H_
#define KVT_SERVER_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "codec/scheme.h"
#include "proto/kvt/v1/client.pb.h"
#include "server/request_book.h"

namespace kvt::server {

// INVALID_ARGUMENT listing the valid forms for an unknown scheme name.
absl::StatusOr<codec::Scheme> SchemeFromProto(const v1::SchemeSpec& proto);

v1::TransferEvent EventToProto(const RequestEvent& event);

}  // namespace kvt::server

#endif  // KVT_SERVER_PROTO_CONVERT_H_
