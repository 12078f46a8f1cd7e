// The codec on the GPU (docs/DAEMON.md, "GPU regions"): host-callable launchers of the CUDA encode/decode kernels of
// every scheme, reading pages straight out of a paged KV cache in device memory and decoding straight into one. Plain
// C++: includable by g++ with no CUDA headers (streams are opaque handles). The containers produced are
// byte-identical to EncodePage(..., impl = kReference) for the same values (codec_cuda_test.cc checks every
// scheme); decoded values equal the CPU DecodePage's floats rounded once to the output dtype.
// Functions are thread-compatible: calls on different streams may run concurrently.
//
//   PagedKvView kv{d_cache, KvDType::kBfloat16, KvLayout::kNhd, num_blocks, 16, 8, 128};
//   KVT_ASSIGN_OR_RETURN(std::vector<EncodedPage> pages,
//                        EncodePagesCuda(scheme, CodecOptions{}, kv, /*tokens_per_page=*/256, block_ids));
//   ... send pages[i].stream(0), then pages[i].stream(1) ...
//   KVT_RETURN_IF_ERROR(DecodePagesCuda(containers, /*stages=*/1, CodecOptions{}, dst_kv, dst_block_ids));
#ifndef KVT_CODEC_GPU_CODEC_CUDA_H_
#define KVT_CODEC_GPU_CODEC_CUDA_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/codec.h"
#include "codec/container.h"
#include "codec/options.h"
#include "codec/scheme.h"
#include "common/cuda_util.h"
#include "codec/gpu/host_containers.h"
#include "numerics/dtype.h"

namespace kvt::codec::gpu {

using KvDType = ::kvt::numerics::DType;
using KvLayout = ::kvt::numerics::BlockOrder;  // kNhd [num_blocks, block_tokens, heads, head_dim], kHnd

// One layer's K or V of a paged KV cache in device memory. A channel is (head, dim): c = head * head_dim + dim.
// A page of `tokens` tokens occupies ceil(tokens / block_tokens) blocks, named by a block-id list; token t of
// the page is row t % block_tokens of its (t / block_tokens)-th block.
struct PagedKvView {
  void* data = nullptr;  // device memory; 16-byte alignment enables the vectorized kernels
  KvDType dtype = KvDType::kBfloat16;
  KvLayout layout = KvLayout::kNhd;
  int num_blocks = 0;
  int block_tokens = 0;
  int heads = 0;
  int head_dim = 0;

  int channels() const { return heads * head_dim; }
  size_t bytes() const {
    return static_cast<size_t>(num_blocks) * block_tokens * heads * head_dim * numerics::DTypeBytes(dtype);
  }
};

// Blocks a page of `tokens` tokens spans in `kv`.
int BlocksPerPage(const PagedKvView& kv, int tokens);

// How a caller runs fn(0) .. fn(n - 1), e.g. on its thread pool (the calls are independent); null: in order on
// the calling thread.
using PageLoop = std::function<void(size_t n, const std::function<void(size_t)>& fn)>;

// Encoded pages of one scheme and shape, resident in device memory in the "staging layout": for each page, its
// stream-0 metadata and each stream's packed codes as separate 256-byte-aligned ranges (the container's bytes,
// minus the header, split at the metadata/codes boundary). Owns its memory. Not thread-safe.
class DeviceEncodedPages {
 public:
  // `layout` describes one page (scheme, tokens, channels, chunk_tokens, alpha, top_width); CRCs are
  // ignored.
  static absl::StatusOr<std::unique_ptr<DeviceEncodedPages>> Create(const ContainerLayout& layout, int num_pages);

  const ContainerLayout& layout() const { return layout_; }
  int num_pages() const { return num_pages_; }
  // The most pages the memory holds (Create's num_pages).
  int capacity() const { return capacity_; }
  // Lays out a batch of `num_pages` (1..capacity) in the same memory, so that a caller decoding batches of
  // varying size allocates once. The pages' contents are undefined afterwards. Decodes only: an encode needs
  // the batch at its capacity (its scratch is laid out by it) and refuses any other.
  absl::Status SetNumPages(int num_pages);
  // Device bytes held (the batch at capacity); the pinned mirror, once made, holds as many.
  size_t allocated_bytes() const;
  size_t meta_bytes() const { return meta_bytes_; }       // stream 0's metadata per page (0 for bf16)
  size_t codes_bytes(int stream) const { return codes_bytes_[stream]; }
  size_t meta_stride() const { return meta_stride_; }
  size_t codes_stride(int stream) const { return codes_stride_[stream]; }
  uint8_t* meta(int page) const { return base_ + page * meta_stride_; }
  uint8_t* codes(int stream, int page) const { return base_ + codes_offset_[stream] + page * codes_stride_[stream]; }
  // Payload bytes of all pages (what crosses the wire, headers excluded).
  size_t payload_bytes() const;
  // The device word the kernels report errors through (see gpu/codec_kernels.h).
  void* status_word() const { return status_->get(); }
  // Multi-stream lynx: the encoder's scratch for the anchor tables (code counts, codec_kernels.h Staging); else
  // null.
  uint32_t* histogram() const { return histogram_ ? static_cast<uint32_t*>(histogram_->get()) : nullptr; }
  // The lynx encoder's frame-spike scratch (codec_kernels.h Staging::frame_sub); null without frame spikes.
  float* frame_scratch() const { return frame_scratch_ ? static_cast<float*>(frame_scratch_->get()) : nullptr; }
  // What a launch's lynx tables are made from: the scheme (kind, spike flag, stage widths), alpha and top width as
  // bits, and for a decode its stages and anchor rule (0 and 0 for an encode). Equal keys mean equal tables. Fixed
  // size, so that building and comparing one on every launch allocates nothing (a Scheme's stage_bits would).
  struct TablesKey {
    SchemeKind kind = SchemeKind::kLynx;
    bool spike_reserve = false;
    std::array<int, kMaxStreams + 1> stage_bits{};  // the widths, then 0
    uint32_t alpha_bits = 0, top_width_bits = 0;
    int decode_stages = 0, decode_rule = 0;
    bool operator==(const TablesKey& o) const {
      return kind == o.kind && spike_reserve == o.spike_reserve && stage_bits == o.stage_bits &&
             alpha_bits == o.alpha_bits && top_width_bits == o.top_width_bits && decode_stages == o.decode_stages &&
             decode_rule == o.decode_rule;
    }
    bool operator!=(const TablesKey& o) const { return !(*this == o); }
  };
  // For the launchers: the n bytes of a launch's lynx tables (internal::LynxDeviceTables) in slot 0 (encode) or
  // 1 (decode), on the device and on the host. Only when `key` differs from the slot's last does `fill` write them
  // into the zeroed host copy and `stream` upload them, so calls with the same scheme and options pay neither the
  // filling (a few microseconds of host time before the launch) nor a copy. Both copies stay valid until the
  // next call for the slot.
  struct StagedTables {
    const void* device = nullptr;
    const void* host = nullptr;
  };
  absl::StatusOr<StagedTables> StageTables(int slot, const TablesKey& key, size_t n,
                                           const std::function<void(void*)>& fill, CudaStream stream) const;

  // Whether ToContainers and FromContainers stage through pinned host memory (true DMA; worth its allocation
  // when this object serves many calls, as a PageStaging's does) or pageable memory (the default). Set before
  // the first of those calls.
  void set_pinned_host(bool pinned) { pinned_host_ = pinned; }

  // Enqueues on `stream` the copy of every page into `out` (Reset to this batch's shape) in container order:
  // the payloads only; each page's container is complete once the stream is synchronized and out.Seal(page)
  // has run.
  absl::Status CopyContainersAsync(HostContainers& out, CudaStream stream = {}) const;
  // Copies every page back and returns its container (header and CRC32C by the CPU codec's code), through a
  // HostContainers kept by this object (pinned with set_pinned_host). Synchronizes `stream`.
  absl::StatusOr<std::vector<EncodedPage>> ToContainers(CudaStream stream = {}) const;
  // Uploads containers (each checked like DecodePage does: header, dims equal to this batch's, CRCs of streams
  // [0, stages)). Only streams [0, stages) are read and uploaded. Synchronizes `stream`.
  absl::Status FromContainers(absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                              CudaStream stream = {});
  // As FromContainers, but uploads straight from the containers' memory with no host copy: containers that lie
  // back to back (each starting where the one before ends) go as one strided DMA per stream, which is true DMA
  // when the memory is pinned. The checks run on `check_loop` (null: in order here). Does not synchronize:
  // the containers' bytes of streams [0, stages) must stay unchanged until `stream` is.
  absl::Status UploadContainers(absl::Span<const absl::Span<const uint8_t>> containers, int stages, CudaStream stream,
                                const PageLoop& check_loop = nullptr);

 private:
  DeviceEncodedPages() = default;

  ContainerLayout layout_;
  // codes_offset_ for num_pages_ pages.
  void LayOut();
  // Bytes [0, used_bytes()) of the buffer hold the batch's pages.
  size_t used_bytes() const;

  int num_pages_ = 0;
  int capacity_ = 0;
  size_t meta_bytes_ = 0, meta_stride_ = 0;
  std::array<size_t, kMaxStreams> codes_bytes_{}, codes_stride_{}, codes_offset_{};
  std::unique_ptr<DeviceBuffer> buffer_;
  std::unique_ptr<DeviceBuffer> status_;
  std::unique_ptr<DeviceBuffer> histogram_;
  std::unique_ptr<DeviceBuffer> frame_scratch_;
  uint8_t* base_ = nullptr;
  mutable std::array<std::unique_ptr<DeviceBuffer>, 2> tables_;
  mutable std::array<std::vector<uint8_t>, 2> tables_host_;
  mutable std::array<std::optional<TablesKey>, 2> tables_key_;  // empty: nothing staged
  // The host side of FromContainers: a mirror of buffer_, made at first use and kept (zeroed once; after
  // SetNumPages moves the ranges, padding may hold earlier bytes, which no kernel uses: they mask partial
  // words); pinned with pinned_host_ (pageable if pinning fails).
  uint8_t* HostMirror() const;
  bool pinned_host_ = false;
  mutable std::unique_ptr<PinnedHostBuffer> pinned_;
  mutable std::vector<uint8_t> pageable_;
  // The host side of ToContainers, made at first use and kept.
  mutable std::unique_ptr<HostContainers> containers_;
};

// ---- Asynchronous launchers (the daemon's hot path and the benchmark): no host synchronization -------------
// Each launch clears the pages' device status word first, on its stream: check a launch's errors
// (CheckDeviceStatus) before the next launch on the same pages, which would clear them, and keep launches on the
// same pages on one stream.

// Encodes pages [0, out.num_pages()) of `src`, page p made of the blocks device_block_ids[p * BlocksPerPage ..],
// into `out` (whose layout names the scheme and page shape; options.chunk_tokens, alpha and top_width must agree
// with it).
// Argument errors are returned at once; errors found on the device (a NaN/Inf in the input, a block id out of
// range) are reported by CheckDeviceStatus after the stream is synchronized. UNIMPLEMENTED for spike reserving.
absl::Status EncodePagesCudaAsync(const CodecOptions& options, const PagedKvView& src, const int32_t* device_block_ids,
                                  DeviceEncodedPages& out, CudaStream stream = {});

// Decodes every page of `in` using streams [0, stages) into `dst` (bf16, fp16 or fp32), page p into the blocks
// device_block_ids[p * BlocksPerPage ..]. Decoded values are the CPU DecodePage's floats rounded to nearest even
// into dst's dtype. Device-side errors (metadata no encoder writes: DATA_LOSS; a block id out of range) via
// CheckDeviceStatus. UNIMPLEMENTED for spike reserving. A partial decode reconstructs by options.anchor_rule and
// options.exact_extremes (the other fields are the encoder's, read from the pages).
absl::Status DecodePagesCudaAsync(const DeviceEncodedPages& in, int stages, const CodecOptions& options,
                                  const PagedKvView& dst, const int32_t* device_block_ids, CudaStream stream = {});

// Synchronizes `stream` and reads `pages`' device status word, which each launch clears first (on its stream), so
// it reports the last launch: INVALID_ARGUMENT naming the first NaN/Inf (page, token, channel) or a bad block
// id, DATA_LOSS for corrupt metadata or values, else OK.
absl::Status CheckDeviceStatus(const DeviceEncodedPages& pages, CudaStream stream = {});

// ---- Synchronous conveniences (tests, tools) ----------------------------------------------------------------

// Encodes num_pages = block_ids.size() / BlocksPerPage(src, tokens_per_page) pages and returns their containers.
absl::StatusOr<std::vector<EncodedPage>> EncodePagesCuda(const Scheme& scheme, const CodecOptions& options,
                                                         const PagedKvView& src, int tokens_per_page,
                                                         absl::Span<const int32_t> block_ids, CudaStream stream = {});

// Decodes containers (all of one scheme and shape) with `stages` streams into dst, container i into the blocks
// block_ids[i * BlocksPerPage ..]. options.anchor_rule and exact_extremes pick the partial reconstruction.
absl::Status DecodePagesCuda(absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                             const CodecOptions& options, const PagedKvView& dst,
                             absl::Span<const int32_t> block_ids, CudaStream stream = {});

// Device memory kept between calls by a caller that encodes or decodes one batch after another (the daemon
// decodes the pages that have landed, and encodes layer by layer): the staging of the last batch's layout and page
// count, with its pinned host mirror, and the block-id buffer. The plain calls allocate all of it per call, and
// each cudaFree waits for the whole device. Not thread-safe.
struct PageStaging {
  std::unique_ptr<DeviceEncodedPages> pages;
  std::unique_ptr<DeviceBuffer> block_ids;
  bool pinned_host = true;  // the staging's host mirror is pinned (DeviceEncodedPages::set_pinned_host)
  // Whether `pages` holds num_pages pages of this layout (scheme, dims, chunk, alpha, top_width, flags): exactly
  // (Fits, the encoders: their scratch is sized by the batch) or at most (FitsUpTo, the decoders).
  bool Fits(const ContainerLayout& layout, int num_pages) const;
  bool FitsUpTo(const ContainerLayout& layout, int num_pages) const;
};

// EncodePagesCuda reusing `staging` (replaced when it does not fit; dropped after a failed call). Synchronizes
// `stream` only.
absl::StatusOr<std::vector<EncodedPage>> EncodePagesCudaWith(PageStaging& staging, const Scheme& scheme,
                                                             const CodecOptions& options, const PagedKvView& src,
                                                             int tokens_per_page, absl::Span<const int32_t> block_ids,
                                                             CudaStream stream = {});

// EncodePagesCudaWith, but the containers land in `out` (Reset to the batch), copied there from the device by
// strided DMA in container order and sealed (CRCs, header) by `seal_loop`: no host copy of the payload, so a data
// plane can send out.stream(p, s) as they are. On error `out`'s pages are undefined (and no copy into it is still
// running). Synchronizes `stream` only.
absl::Status EncodePagesCudaInto(PageStaging& staging, HostContainers& out, const Scheme& scheme,
                                 const CodecOptions& options, const PagedKvView& src, int tokens_per_page,
                                 absl::Span<const int32_t> block_ids, CudaStream stream = {},
                                 const PageLoop& seal_loop = nullptr);

// DecodePagesCudaWith for containers in memory the caller keeps (a daemon's pinned layer inbox): no host copy,
// each run of back-to-back containers uploaded by strided DMA straight from it (DeviceEncodedPages::
// UploadContainers), their checks on `check_loop`. Synchronizes `stream` only; on return nothing reads the
// containers any more.
absl::Status DecodeHostContainersCudaWith(PageStaging& staging, absl::Span<const absl::Span<const uint8_t>> containers,
                                          int stages, const CodecOptions& options, const PagedKvView& dst,
                                          absl::Span<const int32_t> block_ids, CudaStream stream = {},
                                          const PageLoop& check_loop = nullptr);

// DecodePagesCuda reusing `staging` (replaced when it does not fit; dropped after a failed call). Synchronizes
// `stream` only.
absl::Status DecodePagesCudaWith(PageStaging& staging, absl::Span<const absl::Span<const uint8_t>> containers,
                                 int stages, const CodecOptions& options, const PagedKvView& dst,
                                 absl::Span<const int32_t> block_ids, CudaStream stream = {});

}  // namespace kvt::codec::gpu

#endif  // KVT_CODEC_GPU_CODEC_CUDA_H_
