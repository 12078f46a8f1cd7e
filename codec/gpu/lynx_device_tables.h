// The lynx curve's tables as the CUDA kernels take them (codec_kernels.h LynxDeviceTables), filled on the
// host from the CPU reference's (lynx_math.h LynxTables). Host code only; its own target so that host tests
// can check the layouts the kernels rely on without a GPU.
#ifndef KVT_CODEC_GPU_LYNX_DEVICE_TABLES_H_
#define KVT_CODEC_GPU_LYNX_DEVICE_TABLES_H_

#include "codec/gpu/codec_kernels.h"
#include "codec/internal/lynx_math.h"
#include "codec/scheme.h"

namespace kvt::codec::gpu::internal {

// Every field but the decode launch's (decode, decode_from_page, table_first) and anchor_fallback; zeroes the
// rest, padding included (the staged bytes depend on the tables alone).
void FillLynxTables(const ::kvt::codec::internal::LynxTables& t, LynxDeviceTables& d);

// anchor_fallback: the code-centre magnitudes of every partial stage of `scheme`, concatenated like the
// anchor tables (the value the encoder gives a cell no code falls in).
void FillAnchorFallback(const ::kvt::codec::internal::LynxTables& t, const Scheme& scheme,
                        LynxDeviceTables& d);

}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_LYNX_DEVICE_TABLES_H_
