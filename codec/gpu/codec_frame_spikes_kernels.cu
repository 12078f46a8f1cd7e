// The lynx frame spikes on the GPU (codec_kernels.h LaunchFrameSpikeSelect / LaunchFrameSpikeScatter): the CPU
// rule of codec/internal/lynx_frame_spikes.h. The selection kernel runs SelectFrameSpikes
// (codec_frame_spike_select.cuh) on pages the group encoder does not stage (the staging encoder selects in its own
// blocks); the encoder then codes each spike's replacement (lynx_frame_spikes.h MaskFrameSpikes) from
// Staging::frame_sub. The scatter kernel writes them back after a decode, one thread per (page, channel), where
// the lynx tile decoder does not (it writes its tiles' spikes itself). Compiled with --fmad=false, like the other
// codec kernels.
#include "codec/gpu/codec_frame_spike_select.cuh"
#include "codec/gpu/codec_kernels_common.cuh"

namespace kvt::codec::gpu::internal {
namespace {

constexpr int kSpikeThreads = 128;

// Block (32 channels, page), lane = channel: SelectFrameSpikes reading the page from global memory.
template <typename T, int kKeep>
__global__ void __launch_bounds__(kSelectWarps * 32)
    FrameSpikeSelectKernel(const KvGeometry src, const PageShape shape, const Staging out, DeviceStatus* status) {
  const int c = blockIdx.x * 32 + (threadIdx.x & 31);
  const int page = blockIdx.y;
  const int channels = shape.channels;
  const T* data = static_cast<const T*>(src.data);
  auto load = [&](int t, float& x) -> bool {
    size_t base;
    if (!RowBase(src, channels, page, t, base)) {
      atomicOr(&status->errors, kErrBadBlockId);
      return false;
    }
    x = ToFloat<T>(data[ChannelOffset(src, base, c)]);
    return true;
  };
  SelectFrameSpikes<kKeep>(load, shape, out, status, page, c);
}

template <typename OutT>
__global__ void __launch_bounds__(kSpikeThreads)
    FrameSpikeScatterKernel(const Staging in, const PageShape shape, const KvGeometry dst, DeviceStatus* status) {
  const int c = blockIdx.x * kSpikeThreads + threadIdx.x;
  if (c < shape.channels) ScatterFrameSpikes<OutT>(in, shape, dst, status, blockIdx.y, c, 0, shape.tokens);
}

}  // namespace

absl::Status LaunchFrameSpikeSelect(const KvGeometry& src, const PageShape& shape, const Staging& out,
                                    DeviceStatus* status, void* stream_handle) {
  if (shape.frame_spikes < 1 || shape.frame_spikes > kMaxFrameSpikes || out.frame_sub == nullptr) {
    return absl::InternalError("frame spike selection needs 1..7 spikes and a replacement scratch");
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const dim3 grid((shape.channels + 31) / 32, shape.num_pages);
  return ForDType(src.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto launch = [&](auto keep) {
      FrameSpikeSelectKernel<T, decltype(keep)::value><<<grid, kSelectWarps * 32, 0, stream>>>(src, shape, out, status);
      return LaunchError("FrameSpikeSelectKernel");
    };
    switch (shape.frame_spikes) {
      case 1: return launch(std::integral_constant<int, 2>());
      case 2: return launch(std::integral_constant<int, 3>());
      case 3: return launch(std::integral_constant<int, 4>());
      case 4: return launch(std::integral_constant<int, 5>());
      case 5: return launch(std::integral_constant<int, 6>());
      case 6: return launch(std::integral_constant<int, 7>());
      default: return launch(std::integral_constant<int, 8>());
    }
  });
}

absl::Status LaunchFrameSpikeScatter(const Staging& in, const PageShape& shape, const KvGeometry& dst,
                                     DeviceStatus* status, void* stream_handle) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const dim3 grid((shape.channels + kSpikeThreads - 1) / kSpikeThreads, shape.num_pages);
  return ForDType(dst.dtype, [&](auto tag) {
    FrameSpikeScatterKernel<typename decltype(tag)::type><<<grid, kSpikeThreads, 0, stream>>>(in, shape, dst, status);
    return LaunchError("FrameSpikeScatterKernel");
  });
}

}  // namespace kvt::codec::gpu::internal
