#include "server/page_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvt::server {

std::vector<PageSpec> PlanLayerPages(uint32_t layer, uint64_t num_tokens, uint32_t page_tokens) {
  std::vector<PageSpec> pages;
  if (page_tokens == 0 || num_tokens > kMaxRequestTokens) return pages;
  const uint64_t per_kind = (num_tokens + page_tokens - 1) / page_tokens;
  pages.reserve(2 * per_kind);
  for (uint32_t kind = 0; kind < 2; ++kind) {
    for (uint64_t first = 0; first < num_tokens; first += page_tokens) {
      const uint64_t tokens = std::min<uint64_t>(page_tokens, num_tokens - first);
      pages.push_back(PageSpec{layer, kind, static_cast<uint32_t>(first), static_cast<uint32_t>(tokens)});
    }
  }
  return pages;
}

absl::Status CheckRequestBlocks(const KvLayout& layout, absl::Span<const uint32_t> block_ids,
                                uint64_t num_tokens) {
  const KvLayoutSpec& spec = layout.spec();
  if (num_tokens == 0 || num_tokens > kMaxRequestTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("request has ", num_tokens, " tokens; it must have 1..", kMaxRequestTokens));
  }
  if (block_ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("request of ", num_tokens, " tokens names no blocks"));
  }
  const uint64_t needed = (num_tokens + spec.block_tokens - 1) / spec.block_tokens;
  if (block_ids.size() != needed) {
    return absl::InvalidArgumentError(absl::StrCat("request of ", num_tokens, " tokens names ",
                                                   block_ids.size(), " blocks; with ", spec.block_tokens,
                                                   "-token blocks it must name exactly ", needed, " (",
                                                   block_ids.size() < needed ? "too few" : "too many", ")"));
  }
  for (size_t i = 0; i < block_ids.size(); ++i) {
    if (block_ids[i] >= spec.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("block_ids[", i, "] is ", block_ids[i],
                                                     "; the region has blocks 0..", spec.num_blocks - 1));
    }
  }
  std::vector<uint32_t> sorted(block_ids.begin(), block_ids.end());
  std::sort(sorted.begin(), sorted.end());
  const auto repeat = std::adjacent_find(sorted.begin(), sorted.end());
  if (repeat != sorted.end()) {
    // Error path only: find where the repeated id occurs, for the message.
    const auto first = std::find(block_ids.begin(), block_ids.end(), *repeat);
    const auto second = std::find(first + 1, block_ids.end(), *repeat);
    return absl::InvalidArgumentError(
        absl::StrCat("block ", *repeat, " appears twice (block_ids[", first - block_ids.begin(), "] and [",
                     second - block_ids.begin(), "]); a request's blocks must be distinct"));
  }
  return absl::OkStatus();
}

uint32_t PageTokensFor(const KvLayout& layout, uint32_t target_tokens) {
  const uint32_t block = layout.spec().block_tokens;
  return std::max(block, target_tokens / block * block);
}

}  // namespace kvt::server
