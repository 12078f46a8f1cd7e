// The codec API: encode a page into one self-describing container (docs/FORMAT.md), decode a container with
// its first `stages` streams present. One API for every scheme (docs/FORMAT.md) and every implementation
// (scalar reference, AVX2, AVX-512; the CUDA kernels have their own launchers but produce the same codes).
// All functions are thread-safe and keep no state between calls.
//
//   KVT_ASSIGN_OR_RETURN(Scheme scheme, ParseScheme("lynx"));
//   KVT_ASSIGN_OR_RETURN(EncodedPage enc, EncodePage(scheme, CodecOptions{}, page));
//   // send enc.stream(0) on the anchor lane, enc.stream(1) on the residual lane ...
//   KVT_RETURN_IF_ERROR(DecodePage(enc.bytes, /*stages=*/1, out));   // anchor-only view
//   KVT_RETURN_IF_ERROR(DecodePage(enc.bytes, /*stages=*/2, out));   // full 8-bit precision
#ifndef KVT_CODEC_CODEC_H_
#define KVT_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/container.h"
#include "codec/options.h"
#include "codec/page.h"
#include "codec/scheme.h"

namespace kvt::codec {

// One encoded page. `bytes` is the whole container; streams are contiguous ranges of it.
struct EncodedPage {
  std::vector<uint8_t> bytes;
  ContainerLayout layout;

  // Bytes of stream `i` as sent on the wire; stream 0 includes the container header (and metadata).
  absl::Span<const uint8_t> stream(int i) const {
    return absl::MakeConstSpan(bytes).subspan(layout.stream_offset[i], layout.stream_length[i]);
  }
};

// Encodes `page` with `scheme`. INVALID_ARGUMENT for empty or oversized pages, tokens not a multiple of
// options.chunk_tokens (unless the page is shorter than one chunk: then the page is one short chunk), invalid
// options, or NaN/Inf in the input (the message names the first bad (token, channel)).
absl::StatusOr<EncodedPage> EncodePage(const Scheme& scheme, const CodecOptions& options, const PageView& page);

// EncodePage into memory the caller owns (a daemon's pooled layer buffer): the container is written to
// out[0, total_bytes), every byte of it whatever `out` held before, and its layout returned. The same errors, and
// INVALID_ARGUMENT when `out` is smaller than PageLayoutFor(...).total_bytes.
absl::StatusOr<ContainerLayout> EncodePageInto(const Scheme& scheme, const CodecOptions& options, const PageView& page,
                                               absl::Span<uint8_t> out);

// Decodes `container` using its first `stages` streams (1 = anchor only; num_streams = full precision) into
// `out`, which must have the container's tokens and channels. Only the bytes of streams [0, stages) are read,
// so a receiver may call this while later streams are still arriving. Never reads or writes out of bounds:
// DATA_LOSS for a bad CRC or corrupt contents, INVALID_ARGUMENT for a malformed header, lengths or dims that
// disagree with `out`, or `stages` outside [1, num_streams].
absl::Status DecodePage(absl::Span<const uint8_t> container, int stages, const MutablePageView& out,
                        const CodecOptions& options = CodecOptions{});

// Builds what every page of `scheme` under `options` shares, now rather than at the first page: lynx's
// quantizer tables for options.alpha and top_width (tens of milliseconds, once per curve and code width in a
// process).
// A daemon calls it at start so that its first request does not wait. Thread-safe; concurrent first uses build
// once. INVALID_ARGUMENT for invalid options or scheme.
absl::Status PrepareCodec(const Scheme& scheme, const CodecOptions& options = CodecOptions{});

// The layout of a tokens x channels page of `scheme` encoded under `options`, sizes computed (ComputeLayout),
// CRCs unset: the one place options become header fields. alpha is kept for lynx only, top_width for lynx with
// 8-bit codes only (the knee has no meaning for other widths, lynx_math.h), else 0.
ContainerLayout PageLayoutFor(const Scheme& scheme, const CodecOptions& options, int tokens, int channels);

}  // namespace kvt::codec

#endif  // KVT_CODEC_CODEC_H_
