// Which side of a request a daemon plays: it sends the KV (prefill) or receives it (decode).
#ifndef KVT_SERVER_SIDE_H_
#define KVT_SERVER_SIDE_H_

namespace kvt::server {

enum class Side { kPrefill = 1, kDecode = 2 };

inline const char* SideName(Side side) { return side == Side::kPrefill ? "prefill" : "decode"; }

}  // namespace kvt::server

#endif  // KVT_SERVER_SIDE_H_
