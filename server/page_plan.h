// How a request's KV cache splits into codec pages (DESIGN.md 4.1): which pages a layer has, how long they
// are, and whether a request's engine blocks can hold its tokens. Pure functions; thread-safe.
//
//   KVT_RETURN_IF_ERROR(CheckRequestBlocks(layout, block_ids, num_tokens));   // once per request
//   const uint32_t page_tokens = PageTokensFor(layout);
//   for (const PageSpec& page : PlanLayerPages(layer, num_tokens, page_tokens)) GatherPage(..., page, ...);
#ifndef KVT_SERVER_PAGE_PLAN_H_
#define KVT_SERVER_PAGE_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/kv_layout.h"

namespace kvt::server {

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

// The pages of one layer of a `num_tokens`-token request: K pages first, then V pages, each `page_tokens`
// long except a shorter last one; 2 * ceil(num_tokens / page_tokens) pages. Requires page_tokens > 0 and
// num_tokens <= kMaxRequestTokens (CheckRequestBlocks ensures the latter); returns no pages otherwise.
std::vector<PageSpec> PlanLayerPages(uint32_t layer, uint64_t num_tokens, uint32_t page_tokens);

// Checks that `block_ids` (engine block numbers in token order) can hold a `num_tokens`-token request in
// `layout`: INVALID_ARGUMENT, saying which rule and what is allowed, when num_tokens is 0 or above
// kMaxRequestTokens, block_ids is empty, block_ids.size() != ceil(num_tokens / block_tokens) (too few blocks
// cannot hold the tokens; a spare trailing block is refused too, so that a request never names a block it
// does not use), an id is >= num_blocks, or an id repeats. O(n log n) in the number of blocks.
absl::Status CheckRequestBlocks(const KvLayout& layout, absl::Span<const uint32_t> block_ids,
                                uint64_t num_tokens);

// Page length in tokens for `layout`: the largest multiple of block_tokens that is <= target_tokens, and at
// least block_tokens (pages are whole engine blocks).
uint32_t PageTokensFor(const KvLayout& layout, uint32_t target_tokens = 256);

}  // namespace kvt::server

#endif  // KVT_SERVER_PAGE_PLAN_H_
