#include "kv/kv_page_io.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kv/float16.h"

namespace kvt::kv {
namespace {

// The part of a page that lies in one block: `count` tokens from token `first_in_block` of the block at byte
// `offset`, which are page rows [page_row, page_row + count).
struct BlockSegment {
  uint64_t offset;
  uint32_t first_in_block;
  uint32_t count;
  uint32_t page_row;
};

// Checks everything the page touches (see kv_page_io.h) and calls fn(segment) for each block, in token order.
// Nothing is called unless every block checks out.
template <typename Fn>
absl::Status ForEachSegment(const KvLayout& layout, uint64_t region_size,
                            absl::Span<const uint32_t> block_ids, const PageSpec& page, Fn fn) {
  const KvLayoutSpec& spec = layout.spec();
  if (page.layer >= spec.num_layers || page.kind >= 2 || page.tokens == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page (layer ", page.layer, ", kind ", page.kind, ", ", page.tokens, " tokens) must have layer < ",
        spec.num_layers, ", kind 0 (K) or 1 (V) and at least one token"));
  }
  const uint64_t bt = spec.block_tokens;
  const uint64_t end = static_cast<uint64_t>(page.first_token) + page.tokens;
  if (end > block_ids.size() * bt) {
    return absl::InvalidArgumentError(absl::StrCat("page tokens [", page.first_token, ", ", end, ") need ",
                                                   (end + bt - 1) / bt, " blocks; the request has ",
                                                   block_ids.size()));
  }
  const size_t first_block = page.first_token / bt;
  const size_t last_block = (end - 1) / bt;
  for (size_t b = first_block; b <= last_block; ++b) {
    const uint32_t id = block_ids[b];
    if (id >= spec.num_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("block_ids[", b, "] is ", id, "; the region has blocks 0..", spec.num_blocks - 1));
    }
    // No overflow: KvLayout::Create bounded every block's end by the registered region size.
    const uint64_t offset = layout.BlockOffset(page.layer, page.kind, id);
    if (offset + layout.block_bytes() > region_size) {
      return absl::OutOfRangeError(
          absl::StrCat("block ", id, " of layer ", page.layer, (page.kind ? " V" : " K"), " is bytes [",
                       offset, ", ", offset + layout.block_bytes(), ") but the region has ", region_size));
    }
  }
  for (size_t b = first_block; b <= last_block; ++b) {
    const uint64_t block_start = b * bt;
    const uint64_t from = std::max<uint64_t>(block_start, page.first_token);
    const uint64_t to = std::min<uint64_t>(block_start + bt, end);
    fn(BlockSegment{layout.BlockOffset(page.layer, page.kind, block_ids[b]),
                    static_cast<uint32_t>(from - block_start), static_cast<uint32_t>(to - from),
                    static_cast<uint32_t>(from - page.first_token)});
  }
  return absl::OkStatus();
}

void ReadRun(KvDType dtype, const uint8_t* src, size_t n, float* dst) {
  switch (dtype) {
    case KvDType::kBfloat16:
      Bf16ToFloat(src, n, dst);
      return;
    case KvDType::kFloat16:
      Fp16ToFloat(src, n, dst);
      return;
    case KvDType::kFloat32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
  }
}

void WriteRun(KvDType dtype, const float* src, size_t n, uint8_t* dst) {
  switch (dtype) {
    case KvDType::kBfloat16:
      FloatToBf16(src, n, dst);
      return;
    case KvDType::kFloat16:
      FloatToFp16(src, n, dst);
      return;
    case KvDType::kFloat32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
  }
}

}  // namespace

absl::Status GatherPage(const KvLayout& layout, absl::Span<const uint8_t> region,
                        absl::Span<const uint32_t> block_ids, const PageSpec& page, absl::Span<float> out) {
  const KvLayoutSpec& spec = layout.spec();
  const size_t channels = static_cast<size_t>(spec.num_kv_heads) * spec.head_dim;
  if (out.size() != page.tokens * channels) {
    return absl::InvalidArgumentError(absl::StrCat("page buffer has ", out.size(), " floats; a ", page.tokens,
                                                   "-token page of ", channels, " channels needs ",
                                                   page.tokens * channels));
  }
  const size_t esize = DTypeBytes(spec.dtype);
  const uint8_t* base = region.data();
  float* dst = out.data();
  return ForEachSegment(layout, region.size(), block_ids, page, [&](const BlockSegment& s) {
    const uint8_t* block = base + s.offset;
    float* rows = dst + s.page_row * channels;
    if (spec.order == BlockOrder::kNhd) {
      // The segment's tokens are one contiguous run, laid out exactly as the page's rows.
      ReadRun(spec.dtype, block + layout.ElementIndex(s.first_in_block, 0, 0) * esize, s.count * channels,
              rows);
      return;
    }
    for (uint32_t h = 0; h < spec.num_kv_heads; ++h) {
      const uint8_t* src = block + layout.ElementIndex(s.first_in_block, h, 0) * esize;
      for (uint32_t t = 0; t < s.count; ++t) {
        ReadRun(spec.dtype, src + t * spec.head_dim * esize, spec.head_dim,
                rows + t * channels + h * spec.head_dim);
      }
    }
  });
}

absl::Status ScatterPage(const KvLayout& layout, absl::Span<uint8_t> region,
                         absl::Span<const uint32_t> block_ids, const PageSpec& page,
                         absl::Span<const float> page_values, uint32_t page_head_begin, uint32_t page_heads) {
  const KvLayoutSpec& spec = layout.spec();
  const uint64_t page_head_end = static_cast<uint64_t>(page_head_begin) + page_heads;
  const uint64_t region_head_end = static_cast<uint64_t>(spec.head_begin) + spec.num_kv_heads;
  // The heads both hold: [lo, hi).
  const uint64_t lo = std::max<uint64_t>(spec.head_begin, page_head_begin);
  const uint64_t hi = std::min(region_head_end, page_head_end);
  if (page_heads == 0 || lo >= hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the region holds heads [", spec.head_begin, ", ", region_head_end, "); the page, with heads [",
        page_head_begin, ", ", page_head_end, "), has none of them"));
  }
  const size_t channels = static_cast<size_t>(spec.num_kv_heads) * spec.head_dim;
  const size_t page_channels = static_cast<size_t>(page_heads) * spec.head_dim;
  if (page_values.size() != page.tokens * page_channels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page has ", page_values.size(), " floats; ", page.tokens, " tokens of ", page_heads, " heads of ",
        spec.head_dim, " (the region's head_dim) are ", page.tokens * page_channels));
  }
  const size_t esize = DTypeBytes(spec.dtype);
  const uint32_t heads = static_cast<uint32_t>(hi - lo);
  const uint32_t first_head = static_cast<uint32_t>(lo - spec.head_begin);  // in the region's blocks
  const size_t written = static_cast<size_t>(heads) * spec.head_dim;         // channels of a token written
  // Channel of the first written head within a page row.
  const size_t channel_offset = static_cast<size_t>(lo - page_head_begin) * spec.head_dim;
  uint8_t* base = region.data();
  const float* values = page_values.data();
  return ForEachSegment(layout, region.size(), block_ids, page, [&](const BlockSegment& s) {
    uint8_t* block = base + s.offset;
    const float* rows = values + s.page_row * page_channels + channel_offset;
    if (spec.order == BlockOrder::kNhd) {
      uint8_t* dst = block + layout.ElementIndex(s.first_in_block, first_head, 0) * esize;
      if (page_channels == channels && written == channels) {
        WriteRun(spec.dtype, rows, s.count * channels, dst);
        return;
      }
      for (uint32_t t = 0; t < s.count; ++t) {
        WriteRun(spec.dtype, rows + t * page_channels, written, dst + t * channels * esize);
      }
      return;
    }
    for (uint32_t h = 0; h < heads; ++h) {
      uint8_t* dst = block + layout.ElementIndex(s.first_in_block, first_head + h, 0) * esize;
      for (uint32_t t = 0; t < s.count; ++t) {
        WriteRun(spec.dtype, rows + t * page_channels + h * spec.head_dim, spec.head_dim,
                 dst + t * spec.head_dim * esize);
      }
    }
  });
}

}  // namespace kvt::kv
