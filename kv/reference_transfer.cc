#include "kv/reference_transfer.h"

#include <algorithm>
#include <vector>

#include "codec/codec.h"
#include "common/status_macros.h"
#include "kv/kv_page_io.h"
#include "kv/transfer_plan.h"

namespace kvt::kv {

absl::Status ApplyReferenceTransfer(const ReferenceTransfer& t, absl::Span<uint8_t> dst) {
  const KvLayoutSpec& src = t.src_layout->spec();
  const uint32_t channels = src.num_kv_heads * src.head_dim;
  KVT_ASSIGN_OR_RETURN(TransferPlan plan, MakeTransferPlan(t.scheme, t.chunk_tokens, src.num_layers, t.num_tokens,
                                                           t.page_tokens, channels));
  codec::CodecOptions options;
  options.chunk_tokens = t.chunk_tokens;
  const int stages = t.stages == 0 ? t.scheme.num_streams() : t.stages;
  std::vector<float> values;
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    if (!t.layers.empty() && std::find(t.layers.begin(), t.layers.end(), static_cast<int>(l)) == t.layers.end()) {
      continue;
    }
    for (const PlannedPage& page : plan.layers[l]) {
      const int tokens = static_cast<int>(page.spec.tokens);
      values.resize(static_cast<size_t>(tokens) * channels);
      KVT_RETURN_IF_ERROR(GatherPage(*t.src_layout, t.src, t.src_blocks, page.spec, absl::MakeSpan(values)));
      KVT_ASSIGN_OR_RETURN(codec::EncodedPage enc,
                           codec::EncodePage(t.scheme, options, {values.data(), tokens, static_cast<int>(channels)}));
      KVT_RETURN_IF_ERROR(
          codec::DecodePage(enc.bytes, stages, {values.data(), tokens, static_cast<int>(channels)}));
      KVT_RETURN_IF_ERROR(ScatterPage(*t.dst_layout, dst, t.dst_blocks, page.spec, values, src.head_begin,
                                      src.num_kv_heads));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::kv
