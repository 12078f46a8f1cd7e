// The exact-extremes pass of a partial lynx decode on the GPU (codec_kernels.h LaunchExactExtremes): a thread
// per (page, chunk, channel) reads the chunk's code prefixes of its channel (adjacent threads read adjacent
// fields, so a warp's loads coalesce), finds the single top-cell value of each sign, and rewrites it in the
// destination with the CPU's float ops (codec/internal/lynx_extremes.cc), rounded once into the output dtype.
#include "codec/gpu/codec_kernels_common.cuh"

namespace kvt::codec::gpu::internal {
namespace {

struct ExtremesParams {
  Staging in;
  PageShape shape;
  KvGeometry dst;
  int stages;
  int stage_bits[kMaxStreams];
  int known;
};

template <typename OutT>
__global__ void __launch_bounds__(kThreads) ExactExtremesKernel(ExtremesParams p, const LynxDeviceTables* tables) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int k = blockIdx.y;
  const int page = blockIdx.z;
  const int channels = p.shape.channels;
  if (c >= channels) return;
  const uint32_t top_pos = (1u << (p.known - 1)) - 1;
  const uint32_t top_neg = (1u << p.known) - 1;
  const int t0 = k * p.shape.chunk_len;
  int row_pos = -1, row_neg = -1;  // -1: none yet; -2: several
  for (int r = 0; r < p.shape.chunk_len; ++r) {
    const unsigned long long i = static_cast<unsigned long long>(t0 + r) * channels + c;
    uint32_t prefix = 0;
    for (int s = 0; s < p.stages; ++s) {
      const uint32_t* words = reinterpret_cast<const uint32_t*>(p.in.codes[s] + page * p.in.codes_stride[s]);
      prefix = (prefix << p.stage_bits[s]) | ReadField(words, i, p.stage_bits[s]);
    }
    if (prefix == top_pos) row_pos = row_pos == -1 ? r : -2;
    if (prefix == top_neg) row_neg = row_neg == -1 ? r : -2;
  }
  if (row_pos < 0 && row_neg < 0) return;
  const uint8_t* meta = p.in.meta + static_cast<size_t>(page) * p.in.meta_stride;
  const float lo = reinterpret_cast<const float*>(meta)[c];
  const float hi = reinterpret_cast<const float*>(meta)[channels + c];
  if (!isfinite(lo) || !isfinite(hi) || !(lo <= hi)) return;  // reported by the decode launch
  const Frame f = MakeFrame(lo, hi);
  float mu, sigma;
  if (!DecodeChunk(meta + p.in.ends_offset, static_cast<size_t>(k) * channels + c, f, mu, sigma)) return;
  const float top = tables->full_values[tables->max_code];
  OutT* out = static_cast<OutT*>(p.dst.data);
  size_t base;
  if (row_pos >= 0 && RowBase(p.dst, channels, page, t0 + row_pos, base)) {
    out[ChannelOffset(p.dst, base, c)] = FromFloat<OutT>(Reconstruct(top, mu, sigma, lo, hi));
  }
  if (row_neg >= 0 && RowBase(p.dst, channels, page, t0 + row_neg, base)) {
    out[ChannelOffset(p.dst, base, c)] = FromFloat<OutT>(Reconstruct(-top, mu, sigma, lo, hi));
  }
}

}  // namespace

absl::Status LaunchExactExtremes(const Scheme& scheme, int stages, const LynxDeviceTables* tables,
                                 const Staging& in, const PageShape& shape, const KvGeometry& dst,
                                 void* stream_handle) {
  if (scheme.kind != SchemeKind::kLynx || tables == nullptr || stages < 1 || stages >= scheme.num_streams()) {
    return absl::InternalError("the exact-extremes pass needs a partial lynx decode and its tables");
  }
  ExtremesParams p;
  p.in = in;
  p.shape = shape;
  p.dst = dst;
  p.stages = stages;
  p.known = 0;
  for (int i = 0; i < kMaxStreams; ++i) p.stage_bits[i] = i < stages ? scheme.stage_bits[i] : 0;
  for (int i = 0; i < stages; ++i) p.known += scheme.stage_bits[i];
  if (shape.num_pages == 0 || shape.num_chunks == 0) return absl::OkStatus();
  const dim3 grid((shape.channels + kThreads - 1) / kThreads, shape.num_chunks, shape.num_pages);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  switch (dst.dtype) {
    case DType::kFloat32:
      ExactExtremesKernel<float><<<grid, kThreads, 0, stream>>>(p, tables);
      break;
    case DType::kBfloat16:
      ExactExtremesKernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p, tables);
      break;
    case DType::kFloat16:
      ExactExtremesKernel<__half><<<grid, kThreads, 0, stream>>>(p, tables);
      break;
  }
  return LaunchError("ExactExtremesKernel");
}

}  // namespace kvt::codec::gpu::internal
