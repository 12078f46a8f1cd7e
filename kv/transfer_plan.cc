#include "kv/transfer_plan.h"

#include "absl/strings/str_cat.h"
#include "codec/container.h"
#include "codec/page.h"
#include "common/status_macros.h"

namespace kvt::kv {
namespace {

constexpr uint64_t kMaxPlannedTokens = uint64_t{1} << 24;

absl::StatusOr<PlannedPage> PlanPage(const codec::Scheme& scheme, int chunk_tokens, uint32_t channels,
                                     PageSpec spec) {
  KVT_RETURN_IF_ERROR(codec::ValidatePageDims(static_cast<int>(spec.tokens), static_cast<int>(channels),
                                              chunk_tokens));
  codec::ContainerLayout layout;
  layout.scheme = scheme;
  layout.tokens = static_cast<int>(spec.tokens);
  layout.channels = static_cast<int>(channels);
  layout.chunk_tokens = chunk_tokens;
  codec::ComputeLayout(layout);
  PlannedPage page;
  page.spec = spec;
  for (int s = 0; s < scheme.num_streams(); ++s) page.stream_bytes.push_back(layout.stream_length[s]);
  return page;
}

}  // namespace

uint64_t PlannedPage::total_bytes() const {
  uint64_t total = 0;
  for (uint64_t b : stream_bytes) total += b;
  return total;
}

uint64_t TransferPlan::total_bytes() const {
  uint64_t total = 0;
  for (const auto& layer : layers) {
    for (const PlannedPage& p : layer) total += p.total_bytes();
  }
  return total;
}

uint64_t TransferPlan::stream_bytes(int stream) const {
  uint64_t total = 0;
  for (const auto& layer : layers) {
    for (const PlannedPage& p : layer) {
      if (stream < static_cast<int>(p.stream_bytes.size())) total += p.stream_bytes[stream];
    }
  }
  return total;
}

absl::StatusOr<TransferPlan> MakeTransferPlan(const codec::Scheme& scheme, int chunk_tokens, uint32_t num_layers,
                                              uint64_t num_tokens, uint32_t target_page_tokens, uint32_t channels) {
  KVT_RETURN_IF_ERROR(codec::ValidateScheme(scheme));
  if (chunk_tokens < 0 || chunk_tokens > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_tokens must be 1..256, or 0 for the scheme's own, got ", chunk_tokens));
  }
  chunk_tokens = codec::ResolveChunkTokens(scheme, chunk_tokens);
  if (num_layers == 0 || num_layers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("num_layers must be 1..1024, got ", num_layers));
  }
  if (num_tokens == 0 || num_tokens > kMaxPlannedTokens) {
    return absl::InvalidArgumentError(absl::StrCat("num_tokens must be 1..", kMaxPlannedTokens, ", got ", num_tokens));
  }
  if (channels == 0 || channels > static_cast<uint32_t>(codec::kMaxPageChannels)) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels (heads * head_dim) must be 1..", codec::kMaxPageChannels, ", got ", channels));
  }
  TransferPlan plan;
  plan.scheme = scheme;
  plan.chunk_tokens = chunk_tokens;
  plan.channels = channels;
  plan.num_tokens = num_tokens;
  // Whole chunks per page, and no more values than the codec takes in one page.
  const uint64_t page_tokens = static_cast<uint64_t>(codec::PlannedPageTokens(
      static_cast<int>(channels), static_cast<int>(std::min<uint32_t>(target_page_tokens, 1u << 30)), chunk_tokens));
  plan.page_tokens = static_cast<uint32_t>(page_tokens);

  // Token ranges of one kind of one layer: full pages, then whole chunks, then a part of a chunk.
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint64_t t = 0;
  while (num_tokens - t >= page_tokens) {
    ranges.emplace_back(static_cast<uint32_t>(t), static_cast<uint32_t>(page_tokens));
    t += page_tokens;
  }
  const uint64_t whole = (num_tokens - t) / chunk_tokens * chunk_tokens;
  if (whole > 0) {
    ranges.emplace_back(static_cast<uint32_t>(t), static_cast<uint32_t>(whole));
    t += whole;
  }
  if (t < num_tokens) ranges.emplace_back(static_cast<uint32_t>(t), static_cast<uint32_t>(num_tokens - t));

  plan.layers.resize(num_layers);
  for (uint32_t layer = 0; layer < num_layers; ++layer) {
    for (uint32_t kind = 0; kind < 2; ++kind) {
      for (const auto& [first, tokens] : ranges) {
        KVT_ASSIGN_OR_RETURN(PlannedPage page, PlanPage(scheme, chunk_tokens, channels,
                                                        PageSpec{layer, kind, first, tokens}));
        plan.layers[layer].push_back(std::move(page));
      }
    }
  }
  return plan;
}

}  // namespace kvt::kv
