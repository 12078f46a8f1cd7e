#include "kv/page_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvt::kv {

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

}  // namespace kvt::kv
