// Pieces the decode kernels share (codec_decode_kernels.cu, codec_lynx_tile_decode.cu): the launch parameters, the
// stage merging into code prefixes and shared-memory vector loads; and the lynx tile decoder's entry points, which
// codec_decode_kernels.cu's launcher calls. Included only by those two files. Compile with --fmad=false.
#ifndef KVT_CODEC_GPU_CODEC_DECODE_COMMON_CUH_
#define KVT_CODEC_GPU_CODEC_DECODE_COMMON_CUH_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "codec/gpu/codec_kernels_common.cuh"

namespace kvt::codec::gpu::internal {

struct DecodeParams {
  Staging in;
  PageShape shape;
  KvGeometry dst;
  DeviceStatus* status;
  int stages;
  int stage_bits[kMaxStreams];
  int total_bits;  // of the scheme (uniform: its code width)
  // Lynx partial decodes in LynxTileDecodeKernel: apply the exact-extremes rule while writing (other kernels
  // leave it to LaunchExactExtremes).
  int exact_extremes;
  // Lynx with frame spikes in LynxTileDecodeKernel, when nothing runs after it but the spikes: each block writes
  // its tile's spikes after its own stores (else LaunchFrameSpikeScatter's kernel does, after everything).
  int frame_spikes_in_tiles;
  // shape.chunk_len and dst.block_tokens as divisors (LynxTileDecodeKernel's tile, chunk and block indices).
  FastDivisor chunk_div, block_div;
};

// Whether LynxTileDecodeKernel takes a launch (channels and head_dim multiples of 8, 16-byte aligned output too,
// chunks of >= 16 tokens and whole 8-token runs, destination blocks of whole 8-token runs).
bool LynxTileDecodeFits(const DecodeParams& p);
// Launches LynxTileDecodeKernel (codec_lynx_tile_decode.cu) for a decode that fits, its instance picked by the
// output dtype, the stages' widths and the exact-extremes rule; launch errors as Status.
absl::Status LaunchLynxTileDecode(const DecodeParams& p, const LynxDeviceTables* tables, cudaStream_t stream);

namespace {

// VEC consecutive floats of shared memory (16-byte aligned when VEC == 8).
template <int VEC>
__device__ __forceinline__ void LoadShared(const float* p, float* out) {
  if constexpr (VEC == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] = p[e];
  }
}
// Appends one stage's fields (W bits each; W == 0: any width w) of 8 channels x `rows` consecutive tokens to the
// code prefixes pre[i] (one byte per value), the fields of token i at byte (octet0 + i * row_octets) * w.
template <int W>
__device__ __forceinline__ void MergeStage(const uint8_t* codes, unsigned octet0, unsigned row_octets, int rows, int w,
                                           unsigned long long* pre) {
  constexpr int kRows = kDecodeTokensPerThread;
  if constexpr (W != 0) w = W;
  unsigned long long bits[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    bits[i] = 0;
    if (i < rows) {
      const uint8_t* q = codes + static_cast<size_t>(octet0 + i * row_octets) * w;
      if constexpr (W == 1) {
        bits[i] = *q;
      } else if constexpr (W == 2) {
        bits[i] = *reinterpret_cast<const uint16_t*>(q);
      } else if constexpr (W == 4) {
        bits[i] = *reinterpret_cast<const uint32_t*>(q);
      } else if constexpr (W == 8) {
        bits[i] = *reinterpret_cast<const unsigned long long*>(q);
      } else {
        for (int b = 0; b < w; ++b) bits[i] |= static_cast<unsigned long long>(q[b]) << (8 * b);
      }
    }
  }
  const unsigned long long mask = (1ull << w) - 1;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    unsigned long long spread;
    if constexpr (W == 8) {
      spread = bits[i];
    } else if constexpr (W == 4) {  // nibbles 0..7 to bytes 0..7
      const uint32_t x = static_cast<uint32_t>(bits[i]);
      const uint32_t even = x & 0x0F0F0F0Fu, odd = (x >> 4) & 0x0F0F0F0Fu;
      spread = __byte_perm(even, odd, 0x5140) | (static_cast<unsigned long long>(__byte_perm(even, odd, 0x7362)) << 32);
    } else {
      spread = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) spread |= ((bits[i] >> (e * w)) & mask) << (8 * e);
    }
    pre[i] = (pre[i] << w) | spread;  // prefixes stay below 2^8: no byte overflows into the next
  }
}

// Merges streams [0, p.stages) of `page` into the thread's code prefixes, each stage by MergeStage of its width
// (chosen once per stage: every row's fields are then one load of a known width).
template <typename Params>
__device__ __forceinline__ void MergeStages(const Params& p, int page, unsigned octet0, unsigned row_octets, int rows,
                                            unsigned long long* pre) {
  for (int s = 0; s < p.stages; ++s) {
    const int w = p.stage_bits[s];
    const uint8_t* codes = p.in.codes[s] + page * p.in.codes_stride[s];
    switch (w) {
      case 1:
        MergeStage<1>(codes, octet0, row_octets, rows, w, pre);
        break;
      case 2:
        MergeStage<2>(codes, octet0, row_octets, rows, w, pre);
        break;
      case 4:
        MergeStage<4>(codes, octet0, row_octets, rows, w, pre);
        break;
      case 8:
        MergeStage<8>(codes, octet0, row_octets, rows, w, pre);
        break;
      default:
        MergeStage<0>(codes, octet0, row_octets, rows, w, pre);
    }
  }
}
}  // namespace
}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_CODEC_DECODE_COMMON_CUH_
