// A request's pages (docs/FORMAT.md) as the page readers take them, and whether a request's engine blocks can
// hold its tokens. The page plan itself is kv/transfer_plan.h. Pure functions; thread-safe.
//
//   KVT_RETURN_IF_ERROR(CheckRequestBlocks(layout, block_ids, num_tokens));   // once per request
#ifndef KVT_KV_PAGE_PLAN_H_
#define KVT_KV_PAGE_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kv/kv_layout.h"

namespace kvt::kv {

// Most tokens one request may have: token numbers are uint32 in PageSpec.
inline constexpr uint64_t kMaxRequestTokens = UINT32_MAX;

// One page of a request: `tokens` consecutive tokens starting at `first_token` (within the request) of layer
// `layer`'s K (kind 0) or V (kind 1), all channels of the region's heads.
struct PageSpec {
  uint32_t layer = 0;
  uint32_t kind = 0;
  uint32_t first_token = 0;
  uint32_t tokens = 0;

  friend bool operator==(const PageSpec& a, const PageSpec& b) {
    return a.layer == b.layer && a.kind == b.kind && a.first_token == b.first_token && a.tokens == b.tokens;
  }
};

// Checks that `block_ids` (engine block numbers in token order) can hold a `num_tokens`-token request in
// `layout`: INVALID_ARGUMENT, saying which rule and what is allowed, when num_tokens is 0 or above
// kMaxRequestTokens, block_ids is empty, block_ids.size() != ceil(num_tokens / block_tokens) (too few blocks
// cannot hold the tokens; a spare trailing block is refused too, so that a request never names a block it
// does not use), an id is >= num_blocks, or an id repeats. O(n log n) in the number of blocks.
absl::Status CheckRequestBlocks(const KvLayout& layout, absl::Span<const uint32_t> block_ids,
                                uint64_t num_tokens);

}  // namespace kvt::kv

#endif  // KVT_KV_PAGE_PLAN_H_
