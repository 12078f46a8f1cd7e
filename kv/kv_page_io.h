// Moves one page (docs/FORMAT.md) between an engine's KV blocks in a registered region and the codec's float32
// page: GatherPage on the prefill side (blocks -> page, widening bf16/fp16), ScatterPage on the decode side
// (page -> blocks, narrowing, keeping only the heads this region holds: docs/DAEMON.md, tensor parallelism). On
// the daemon's data path: whole-block bounds checks, contiguous runs, vectorized conversion. Thread-safe;
// concurrent calls on overlapping bytes are the caller's business.
//
//   std::vector<float> page_values(page.tokens * layout.spec().num_kv_heads * layout.spec().head_dim);
//   KVT_RETURN_IF_ERROR(GatherPage(layout, region_bytes, block_ids, page, absl::MakeSpan(page_values)));
#ifndef KVT_KV_KV_PAGE_IO_H_
#define KVT_KV_KV_PAGE_IO_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kv/kv_layout.h"
#include "kv/page_plan.h"

namespace kvt::kv {

// Common to both directions:
// - `region` is the region's mapped bytes (offset 0 = the region's start, as the layout's offsets count);
//   every block the page touches must lie wholly inside it, else OUT_OF_RANGE (nothing is read or written).
// - `block_ids` are the request's blocks in token order, as CheckRequestBlocks accepts them: the caller
//   checks them once per request. Here only what memory safety needs is checked: an id >= num_blocks among
//   the blocks the page touches, or a page past block_ids.size() * block_tokens tokens, is INVALID_ARGUMENT.
// - page.layer < num_layers, page.kind < 2 and page.tokens > 0, else INVALID_ARGUMENT. All checks happen
//   before any byte is moved.

// Reads `page` into `out`: float32, token-major [page.tokens, num_kv_heads * head_dim], channel = head *
// head_dim + dim over the region's heads; bf16/fp16 widen exactly. INVALID_ARGUMENT if out.size() differs.
absl::Status GatherPage(const KvLayout& layout, absl::Span<const uint8_t> region,
                        absl::Span<const uint32_t> block_ids, const PageSpec& page, absl::Span<float> out);

// Writes a decoded page into `region`'s blocks. `page_values` is float32, token-major [page.tokens,
// page_heads * head_dim] (head_dim the region's), holding global heads [page_head_begin, page_head_begin +
// page_heads), i.e. head numbers of the model as in the layout's head_begin. Only the heads both the region
// ([head_begin, head_begin + num_kv_heads)) and the page hold are written (tensor parallelism M -> N: a region
// of one rank takes its heads from a wider page, or a page of a narrower rank fills its part of a wider region;
// the region's other heads are untouched); INVALID_ARGUMENT if they share none, if page_heads is 0, or if
// page_values.size() != page.tokens * page_heads * head_dim. Narrows to bf16/fp16 with round-to-nearest-even (overflow gives +-inf, NaN stays NaN).
absl::Status ScatterPage(const KvLayout& layout, absl::Span<uint8_t> region,
                         absl::Span<const uint32_t> block_ids, const PageSpec& page,
                         absl::Span<const float> page_values, uint32_t page_head_begin, uint32_t page_heads);

}  // namespace kvt::kv

#endif  // KVT_KV_KV_PAGE_IO_H_
