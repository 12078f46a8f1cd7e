// Page splitting around the codec; see tensor_codec.h.
#include "codec/eval/tensor_codec.h"

#include "absl/strings/str_cat.h"
#include "codec/page.h"

namespace kvt::codec::eval {

absl::StatusOr<std::vector<std::pair<int, int>>> PlanPages(int tokens, int page_tokens, int chunk_tokens) {
  if (tokens < 1) return absl::InvalidArgumentError("a tensor needs at least one token");
  if (chunk_tokens < 1 || page_tokens < chunk_tokens || page_tokens % chunk_tokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_tokens (", page_tokens,
                                                   ") must be a positive multiple of chunk_tokens (",
                                                   chunk_tokens, ")"));
  }
  std::vector<std::pair<int, int>> pages;
  int t = 0;
  for (; t + page_tokens <= tokens; t += page_tokens) pages.emplace_back(t, page_tokens);
  const int rest = tokens - t;
  const int whole = rest - rest % chunk_tokens;
  if (whole > 0) pages.emplace_back(t, whole);
  if (rest > whole) pages.emplace_back(t + whole, rest - whole);
  return pages;
}

size_t EncodedTensor::StreamBytes(int i) const {
  size_t n = 0;
  for (const EncodedPage& p : encoded) n += p.layout.stream_length[i];
  return n;
}

absl::StatusOr<EncodedTensor> EncodeTensor(const Scheme& scheme, const CodecOptions& options,
                                           const TensorView& tensor, int page_tokens) {
  const int chunk = ResolveChunkTokens(scheme, options.chunk_tokens);
  if (page_tokens == 0) page_tokens = PlannedPageTokens(tensor.channels, 0, chunk);  // kvtd's own
  auto pages = PlanPages(tensor.tokens, page_tokens, chunk);
  if (!pages.ok()) return pages.status();
  EncodedTensor out;
  out.tokens = tensor.tokens;
  out.channels = tensor.channels;
  out.num_streams = scheme.num_streams();
  out.pages = *std::move(pages);
  out.encoded.reserve(out.pages.size());
  for (const auto& [start, n] : out.pages) {
    PageView view;
    view.data = tensor.data + static_cast<size_t>(start) * tensor.channels;
    view.tokens = n;
    view.channels = tensor.channels;
    auto enc = EncodePage(scheme, options, view);
    if (!enc.ok()) {
      return absl::Status(enc.status().code(),
                          absl::StrCat("page at token ", start, ": ", enc.status().message()));
    }
    out.encoded.push_back(*std::move(enc));
  }
  return out;
}

absl::Status DecodeTensor(const EncodedTensor& tensor, int stages, const CodecOptions& options, float* out) {
  for (size_t i = 0; i < tensor.pages.size(); ++i) {
    const auto& [start, n] = tensor.pages[i];
    MutablePageView view;
    view.data = out + static_cast<size_t>(start) * tensor.channels;
    view.tokens = n;
    view.channels = tensor.channels;
    // Hand the decoder only the streams it may read, as a receiver holds them before the rest arrive.
    const EncodedPage& page = tensor.encoded[i];
    if (stages < 1 || stages > tensor.num_streams) {
      return absl::InvalidArgumentError(absl::StrCat("stages ", stages, " outside [1, ", tensor.num_streams, "]"));
    }
    const size_t prefix = page.layout.stream_offset[stages - 1] + page.layout.stream_length[stages - 1];
    absl::Status st = DecodePage(absl::MakeConstSpan(page.bytes).first(prefix), stages, view, options);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("page at token ", start, ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace kvt::codec::eval
