// Payload encoders/decoders of the baseline schemes (bf16, int8/int4, fp8): the bytes of stream 0 after the
// container header, laid out as docs/FORMAT.md says. Callers have validated dims and sized the buffers with
// StreamPayloadBytes. Decoders check the metadata of untrusted payloads and return DATA_LOSS for values no
// encoder writes. Scalar, except EncodeUniform's AVX2 loops (byte-identical to its scalar ones); thread-safe.
#ifndef KVT_CODEC_INTERNAL_BASELINES_H_
#define KVT_CODEC_INTERNAL_BASELINES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "codec/page.h"

namespace kvt::codec::internal {

void EncodeBf16(const PageView& page, uint8_t* payload);
absl::Status DecodeBf16(const uint8_t* payload, const MutablePageView& out);

// Uniform asymmetric RTN with `bits` (8 or 4) per (chunk, channel): fp16 min rounded down, fp16 scale rounded
// up, codes q = clamp(nearbyint((x - min) / scale), 0, 2^bits - 1), decode min + q * scale. `avx2`: the
// per-value loops (chunk minimum and maximum, quantization) in AVX2, with the same float operations in the same
// order, so the bytes are the scalar loops' (the caller checks the CPU has AVX2).
void EncodeUniform(const PageView& page, int bits, int chunk_len, uint8_t* payload, bool avx2 = false);
absl::Status DecodeUniform(const uint8_t* payload, int bits, int chunk_len, const MutablePageView& out);

// e4m3 with one fp32 scale = amax / 448 per (token, group of 128 channels).
void EncodeFp8(const PageView& page, uint8_t* payload);
absl::Status DecodeFp8(const uint8_t* payload, const MutablePageView& out);

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_BASELINES_H_
