#include "codec/codec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "codec/internal/baselines.h"
#include "codec/internal/lynx_codec.h"
#include "codec/internal/lynx_kernels.h"
#include "codec/internal/lynx_math.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace kvt::codec {
namespace {

absl::Status CheckImpl(CodecImpl impl) {
  if (!ImplAvailable(impl)) {
    return absl::InvalidArgumentError(absl::StrCat("codec implementation ", ImplName(impl),
                                                   " is not supported by this CPU"));
  }
  return absl::OkStatus();
}

absl::Status FirstNonFinite(const PageView& page) {
  for (int t = 0; t < page.tokens; ++t) {
    for (int c = 0; c < page.channels; ++c) {
      const float x = page.at(t, c);
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(
            absl::StrCat("page value at (token ", t, ", channel ", c, ") is ", x, ": NaN/Inf cannot be encoded"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

ContainerLayout PageLayoutFor(const Scheme& scheme, const CodecOptions& options, int tokens, int channels) {
  ContainerLayout layout;
  layout.scheme = scheme;
  layout.tokens = tokens;
  layout.channels = channels;
  layout.chunk_tokens = ResolveChunkTokens(scheme, options.chunk_tokens);
  const bool lynx = scheme.kind == SchemeKind::kLynx;
  layout.alpha = lynx ? options.alpha : 0.0f;
  layout.top_width = lynx && scheme.total_code_bits() == 8 ? options.top_width : 0.0f;
  ComputeLayout(layout);
  return layout;
}

absl::Status PrepareCodec(const Scheme& scheme, const CodecOptions& options) {
  KVT_RETURN_IF_ERROR(options.Validate());
  KVT_RETURN_IF_ERROR(ValidateScheme(scheme));
  if (scheme.kind == SchemeKind::kLynx) internal::GetLynxTables(options.alpha, options.top_width, scheme.total_code_bits());
  return absl::OkStatus();
}

namespace {

// What EncodePage and EncodePageInto check before they size or write anything.
absl::Status ValidateEncode(const Scheme& scheme, const CodecOptions& options, const PageView& page) {
  KVT_RETURN_IF_ERROR(options.Validate());
  KVT_RETURN_IF_ERROR(ValidateScheme(scheme));
  if (page.data == nullptr) return absl::InvalidArgumentError("page has no data");
  KVT_RETURN_IF_ERROR(ValidatePageDims(page.tokens, page.channels, ResolveChunkTokens(scheme, options.chunk_tokens)));
  if (page.row_stride != 0 && page.row_stride < static_cast<size_t>(page.channels)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page row_stride ", page.row_stride, " is less than its ", page.channels, " channels"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EncodedPage> EncodePage(const Scheme& scheme, const CodecOptions& options, const PageView& page) {
  KVT_RETURN_IF_ERROR(ValidateEncode(scheme, options, page));
  EncodedPage enc;
  enc.bytes.resize(PageLayoutFor(scheme, options, page.tokens, page.channels).total_bytes);
  KVT_ASSIGN_OR_RETURN(enc.layout, EncodePageInto(scheme, options, page, absl::MakeSpan(enc.bytes)));
  return enc;
}

absl::StatusOr<ContainerLayout> EncodePageInto(const Scheme& scheme, const CodecOptions& options, const PageView& page,
                                               absl::Span<uint8_t> out) {
  KVT_RETURN_IF_ERROR(ValidateEncode(scheme, options, page));
  const CodecImpl impl = ResolveImpl(options.impl);
  KVT_RETURN_IF_ERROR(CheckImpl(impl));
  const internal::LynxKernels& kernels = internal::KernelsFor(impl);
  // lynx scans for NaN/Inf in its statistics pass (EncodeLynx returns false); the other schemes scan first.
  if (scheme.kind != SchemeKind::kLynx && !kernels.all_finite(page)) return FirstNonFinite(page);

  ContainerLayout layout = PageLayoutFor(scheme, options, page.tokens, page.channels);
  if (out.size() < layout.total_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the container needs ", layout.total_bytes, " bytes, ", out.size(), " were given"));
  }
  std::array<uint8_t*, kMaxStreams> streams{};
  for (int i = 0; i < scheme.num_streams(); ++i) {
    streams[i] = out.data() + layout.stream_offset[i] + (i == 0 ? layout.header_bytes : 0);
  }
  const int chunk_len = page.tokens < layout.chunk_tokens ? page.tokens : layout.chunk_tokens;
  CodecOptions resolved = options;
  resolved.chunk_tokens = layout.chunk_tokens;
  switch (scheme.kind) {
    case SchemeKind::kBf16:
      internal::EncodeBf16(page, streams[0]);
      break;
    case SchemeKind::kInt8:
    case SchemeKind::kInt4:
      internal::EncodeUniform(page, scheme.stage_bits[0], chunk_len, streams[0], impl != CodecImpl::kReference);
      break;
    case SchemeKind::kFp8:
      internal::EncodeFp8(page, streams[0]);
      break;
    case SchemeKind::kLynx:
      if (!internal::EncodeLynx(scheme, resolved, page, kernels, streams)) return FirstNonFinite(page);
      break;
  }
  for (int i = 0; i < scheme.num_streams(); ++i) {
    const size_t payload = layout.stream_length[i] - (i == 0 ? layout.header_bytes : 0);
    layout.stream_crc[i] = Crc32c(streams[i], payload);
  }
  WriteContainerHeader(layout, out.data());
  return layout;
}

absl::Status DecodePage(absl::Span<const uint8_t> container, int stages, const MutablePageView& out,
                        const CodecOptions& options) {
  KVT_RETURN_IF_ERROR(options.Validate());
  const CodecImpl impl = ResolveImpl(options.impl);
  KVT_RETURN_IF_ERROR(CheckImpl(impl));
  KVT_ASSIGN_OR_RETURN(ContainerLayout layout, ParseContainerHeader(container));
  const Scheme& scheme = layout.scheme;
  if (stages < 1 || stages > scheme.num_streams()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stages ", stages, " outside 1..", scheme.num_streams(), " for scheme ", scheme.Name()));
  }
  if (out.data == nullptr) return absl::InvalidArgumentError("output page has no data");
  if (out.tokens != layout.tokens || out.channels != layout.channels) {
    return absl::InvalidArgumentError(absl::StrCat("output page is ", out.tokens, " x ", out.channels,
                                                   " but the container holds ", layout.tokens, " x ",
                                                   layout.channels));
  }
  if (out.row_stride != 0 && out.row_stride < static_cast<size_t>(out.channels)) {
    return absl::InvalidArgumentError(
        absl::StrCat("output row_stride ", out.row_stride, " is less than its ", out.channels, " channels"));
  }
  KVT_RETURN_IF_ERROR(CheckContainerStreams(layout, container, stages));
  std::array<const uint8_t*, kMaxStreams> streams{};
  for (int i = 0; i < stages; ++i) {
    streams[i] = container.data() + layout.stream_offset[i] + (i == 0 ? layout.header_bytes : 0);
  }
  const int chunk_len = layout.tokens < layout.chunk_tokens ? layout.tokens : layout.chunk_tokens;
  switch (scheme.kind) {
    case SchemeKind::kBf16:
      return internal::DecodeBf16(streams[0], out);
    case SchemeKind::kInt8:
    case SchemeKind::kInt4:
      return internal::DecodeUniform(streams[0], scheme.stage_bits[0], chunk_len, out);
    case SchemeKind::kFp8:
      return internal::DecodeFp8(streams[0], out);
    case SchemeKind::kLynx:
      return internal::DecodeLynx(layout, streams, stages, options, internal::KernelsFor(impl), out);
  }
  return absl::InternalError("unreachable scheme kind");
}

}  // namespace kvt::codec
