// An engine's KV layout to and from its wire form (kvt.v1.KvLayout), for the daemon's services and the clients'
// tools.
#ifndef KVT_KV_LAYOUT_PROTO_H_
#define KVT_KV_LAYOUT_PROTO_H_

#include "absl/status/statusor.h"
#include "kv/kv_layout.h"
#include "proto/kvt/v1/layout.pb.h"

namespace kvt::kv {

// INVALID_ARGUMENT for an unspecified or unknown dtype or block order (other fields are checked by
// KvLayout::Create against the region).
absl::StatusOr<KvLayoutSpec> LayoutFromProto(const v1::KvLayout& proto);
v1::KvLayout LayoutToProto(const KvLayoutSpec& spec);

}  // namespace kvt::kv

#endif  // KVT_KV_LAYOUT_PROTO_H_
