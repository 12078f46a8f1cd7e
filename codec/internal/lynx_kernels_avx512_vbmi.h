// The fused 4-bit lynx paths on AVX-512 VBMI (LynxKernels::codes_nibbles and reconstruct_nibbles): codes packed
// straight into the 4-bit streams, and values rebuilt straight from them; and the narrow end pairs' packing. Each
// returns false, doing nothing, when the CPU lacks VBMI or the input does not suit it (the caller then takes the
// unfused path).
#ifndef KVT_CODEC_INTERNAL_LYNX_KERNELS_AVX512_VBMI_H_
#define KVT_CODEC_INTERNAL_LYNX_KERNELS_AVX512_VBMI_H_

#include <cstdint>

#include "codec/internal/lynx_kernels.h"

namespace kvt::codec::internal {

bool CodesNibbles(const PageView& page, const LynxPageMeta& meta, const LynxTables& tables,
                  uint8_t* const* streams);
bool ReconstructNibbles(const uint8_t* const* streams, int stages, const LynxPageMeta& meta, const float* table,
                        const float* exact_top, const MutablePageView& out);
// LynxKernels::pack_end_pairs for even widths of at most 16 bits (version 4's 14 among them).
bool PackNarrowEnds(const uint16_t* q_low, const uint16_t* q_high, size_t n, int bits, uint8_t* out);

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_LYNX_KERNELS_AVX512_VBMI_H_
