// What a finished transfer must leave in a decode region: the daemons' contract, CPU and GPU paths alike, as
// tests and `kvtctl demo --verify` check it. The source's pages, planned as the daemons plan them, encoded with the
// codec, decoded with the first `stages` streams, rounded into the destination's dtype and heads.
// Thread-compatible (pure function of its inputs).
#ifndef KVT_KV_REFERENCE_TRANSFER_H_
#define KVT_KV_REFERENCE_TRANSFER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "codec/scheme.h"
#include "kv/kv_layout.h"

namespace kvt::kv {

struct ReferenceTransfer {
  const KvLayout* src_layout = nullptr;
  absl::Span<const uint8_t> src;
  absl::Span<const uint32_t> src_blocks;
  const KvLayout* dst_layout = nullptr;
  absl::Span<const uint32_t> dst_blocks;
  uint64_t num_tokens = 0;
  codec::Scheme scheme;
  int stages = 0;                  // 0 = every stream
  absl::Span<const int> layers;    // empty = every layer
  uint32_t page_tokens = 0;        // the daemon's --page_tokens (0: codec::AutoPageTokens)
  int chunk_tokens = 0;            // DaemonOptions::chunk_tokens (0: the scheme's own)
};

// Writes the pages `t` names into `dst` (bytes of a region shaped like *t.dst_layout); other bytes stay as they are.
absl::Status ApplyReferenceTransfer(const ReferenceTransfer& t, absl::Span<uint8_t> dst);

}  // namespace kvt::kv

#endif  // KVT_KV_REFERENCE_TRANSFER_H_
