// Payload encoder/decoder of the lynx family: stream 0's bytes after the header (metadata + anchor codes) and
// the refinement streams, laid out as docs/FORMAT.md says. Callers have validated the scheme, options and dims
// and sized every stream with StreamPayloadBytes. Thread-safe.
#ifndef KVT_CODEC_INTERNAL_LYNX_CODEC_H_
#define KVT_CODEC_INTERNAL_LYNX_CODEC_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "codec/container.h"
#include "codec/internal/lynx_kernels.h"
#include "codec/options.h"
#include "codec/page.h"
#include "codec/scheme.h"

namespace kvt::codec::internal {

// streams[i] points at stream i's payload (stream 0: after the header). Returns false, the streams then
// unspecified, when the page holds a NaN or an infinity (the caller reports where).
bool EncodeLynx(const Scheme& scheme, const CodecOptions& options, const PageView& page, const LynxKernels& kernels,
                const std::array<uint8_t*, kMaxStreams>& streams);

// Decodes with streams [0, stages) (their CRCs already checked); a partial decode reconstructs by
// options.anchor_rule and options.exact_extremes. DATA_LOSS for metadata no encoder writes.
absl::Status DecodeLynx(const ContainerLayout& layout, const std::array<const uint8_t*, kMaxStreams>& streams,
                        int stages, const CodecOptions& options, const LynxKernels& kernels,
                        const MutablePageView& out);

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_CODEC_H_
