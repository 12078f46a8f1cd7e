// The exact-extremes pass of a partial lynx decode on the GPU (codec_kernels.h LaunchExactExtremes): a thread
// per (page, chunk, channel) reads the chunk's code prefixes of its channel (adjacent threads read adjacent
// fields, so a warp's loads coalesce), finds the single top-cell value of each sign, and rewrites it in the
// destination with the CPU's float ops (codec/internal/lynx_extremes.cc), rounded once into the output dtype.
// And the encoder's side (LaunchExcludeSingleExtremes): the same search per partial stage over the codes just
// written, counting the singles at sampled tokens that the stage's anchor table leaves out.
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

// The stage widths of a scheme, passed by value.
struct StageBits {
  int w[kMaxStreams] = {};
  int total = 0;
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
  const Frame f = MakeChannelFrame(lo, hi, p.shape.grid_max);
  float mu, sigma;
  if (!DecodeChunk(meta + p.in.ends_offset, static_cast<size_t>(k) * channels + c, p.shape.end_pair_bits, f, mu,
                   sigma)) {
    return;
  }
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

// A thread per (page, chunk, channel) of the anchor tables' channels (c < kAnchorSampleChannels): each row's full
// code once, every partial stage's prefix from it; a stage's single top-cell value at a sampled token adds its code
// to that stage's exclusion counts.
__global__ void __launch_bounds__(kThreads) ExcludeSinglesKernel(const Staging out, const PageShape shape,
                                                                 int num_streams, StageBits bits) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int k = blockIdx.y;
  const int page = blockIdx.z;
  const int channels = shape.channels;
  if (c >= channels || c >= kAnchorSampleChannels) return;
  const int partial = num_streams - 1;
  int row_pos[kMaxStreams - 1], row_neg[kMaxStreams - 1];  // -1: none yet; -2: several
#pragma unroll
  for (int s = 0; s < kMaxStreams - 1; ++s) row_pos[s] = row_neg[s] = -1;
  const int t0 = k * shape.chunk_len;
  auto code_at = [&](int r) {
    const unsigned long long i = static_cast<unsigned long long>(t0 + r) * channels + c;
    uint32_t code = 0;
    for (int s = 0; s < num_streams; ++s) {
      const uint32_t* words = reinterpret_cast<const uint32_t*>(out.codes[s] + page * out.codes_stride[s]);
      code = (code << bits.w[s]) | ReadField(words, i, bits.w[s]);
    }
    return code;
  };
  for (int r = 0; r < shape.chunk_len; ++r) {
    const uint32_t code = code_at(r);
    int known = 0;
#pragma unroll
    for (int s = 0; s < kMaxStreams - 1; ++s) {
      if (s >= partial) break;
      known += bits.w[s];
      const uint32_t prefix = code >> (bits.total - known);
      if (prefix == (1u << (known - 1)) - 1) row_pos[s] = row_pos[s] == -1 ? r : -2;
      if (prefix == (1u << known) - 1) row_neg[s] = row_neg[s] == -1 ? r : -2;
    }
  }
  uint32_t* excl = out.exclusions + static_cast<size_t>(page) * partial * 256;
#pragma unroll
  for (int s = 0; s < kMaxStreams - 1; ++s) {
    if (s >= partial) break;
    for (int side = 0; side < 2; ++side) {
      const int r = side == 0 ? row_pos[s] : row_neg[s];
      if (r >= 0 && (t0 + r) % kAnchorSampleStride == 0) atomicAdd(&excl[256 * s + code_at(r)], 1u);
    }
  }
}

}  // namespace

absl::Status LaunchExcludeSingleExtremes(const Scheme& scheme, const Staging& out, const PageShape& shape,
                                         void* stream_handle) {
  const int streams = scheme.num_streams();
  if (scheme.kind != SchemeKind::kLynx || streams < 2 || out.exclusions == nullptr) {
    return absl::InternalError("the encoder's exact-extremes pass needs multi-stream lynx and its scratch");
  }
  if (shape.num_pages == 0 || shape.num_chunks == 0) return absl::OkStatus();
  StageBits bits;
  for (int i = 0; i < streams; ++i) {
    bits.w[i] = scheme.stage_bits[i];
    bits.total += scheme.stage_bits[i];
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const cudaError_t e =
      cudaMemsetAsync(out.exclusions, 0, sizeof(uint32_t) * 256 * (streams - 1) * shape.num_pages, stream);
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaMemsetAsync: ", cudaGetErrorName(e)));
  const int sampled = shape.channels < kAnchorSampleChannels ? shape.channels : kAnchorSampleChannels;
  const dim3 grid((sampled + kThreads - 1) / kThreads, shape.num_chunks, shape.num_pages);
  ExcludeSinglesKernel<<<grid, kThreads, 0, stream>>>(out, shape, streams, bits);
  return LaunchError("ExcludeSinglesKernel");
}

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
  return ForDType(dst.dtype, [&](auto tag) {
    ExactExtremesKernel<typename decltype(tag)::type><<<grid, kThreads, 0, stream>>>(p, tables);
    return LaunchError("ExactExtremesKernel");
  });
}

}  // namespace kvt::codec::gpu::internal
