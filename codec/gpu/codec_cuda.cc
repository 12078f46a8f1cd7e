// Host side of the GPU codec (codec_cuda.h): argument checks, the staging layout, container assembly with the
// CPU codec's header and CRC code, and device status. CUDA itself is reached only through cuda_util.h and
// codec_kernels.h.
#include "codec/gpu/codec_cuda.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "codec/gpu/codec_kernels.h"
#include "codec/gpu/lynx_device_tables.h"
#include "codec/internal/bitpack.h"
#include "codec/internal/lynx_math.h"
#include "common/status_macros.h"

namespace kvt::codec::gpu {
namespace {

namespace cpu = ::kvt::codec::internal;
static_assert(internal::kAnchorSampleChannels == cpu::kAnchorSampleChannels, "the tables' channels, as the CPU's");

constexpr size_t kAlign = 256;
size_t RoundUp(size_t n) { return (n + 8 + kAlign - 1) / kAlign * kAlign; }  // +8: room for 64-bit reads

// Bytes of stream 0's payload before its codes.
size_t MetaBytes(const ContainerLayout& l) {
  const size_t chunk_values = static_cast<size_t>(NumChunks(l.tokens, l.chunk_tokens)) * l.channels;
  switch (l.scheme.kind) {
    case SchemeKind::kBf16:
      return 0;
    case SchemeKind::kInt8:
    case SchemeKind::kInt4:
      return 4 * chunk_values;
    case SchemeKind::kFp8:
      return 4 * static_cast<size_t>(l.tokens) * ((static_cast<size_t>(l.channels) + 127) / 128);
    case SchemeKind::kLynx:
      return 8 * static_cast<size_t>(l.channels) + cpu::EndPairBytes(chunk_values, l.scheme.end_pair_bits) +
             (l.scheme.spike_reserve ? 5 * chunk_values : 0) +
             6 * static_cast<size_t>(PageFrameSpikes(l.scheme, l.tokens, l.chunk_tokens)) * l.channels +
             4 * LynxAnchorTableFloats(l.scheme);
  }
  return 0;
}

size_t CodesBytes(const ContainerLayout& l, int stream) {
  const size_t n = static_cast<size_t>(l.tokens) * l.channels;
  switch (l.scheme.kind) {
    case SchemeKind::kBf16:
      return 2 * n;
    case SchemeKind::kFp8:
      return n;
    default:
      return cpu::PackedSize(n, l.scheme.stage_bits[stream]);
  }
}

absl::Status SpikeUnimplemented(const Scheme& scheme) {
  if (!scheme.spike_reserve) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("scheme ", scheme.Name(),
                                               ": spike reserving has no CUDA kernel; encode and decode it with the "
                                               "CPU codec (EncodePage / DecodePage)"));
}

absl::Status ValidateKv(const PagedKvView& kv, int tokens_per_page, const char* what) {
  if (kv.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " has no data"));
  if (kv.num_blocks <= 0 || kv.block_tokens <= 0 || kv.heads <= 0 || kv.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " dims must be positive: blocks ", kv.num_blocks,
                                                   ", block_tokens ", kv.block_tokens, ", heads ", kv.heads,
                                                   ", head_dim ", kv.head_dim));
  }
  if (static_cast<int64_t>(kv.heads) * kv.head_dim > kMaxPageChannels) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", static_cast<int64_t>(kv.heads) * kv.head_dim,
                                                   " channels, more than ", kMaxPageChannels));
  }
  if (tokens_per_page <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokens per page must be positive, got ", tokens_per_page));
  }
  return absl::OkStatus();
}

internal::KvGeometry Geometry(const PagedKvView& kv, int tokens, const int32_t* device_block_ids) {
  internal::KvGeometry g;
  g.data = kv.data;
  g.dtype = kv.dtype;
  g.layout = kv.layout;
  g.num_blocks = kv.num_blocks;
  g.block_tokens = kv.block_tokens;
  g.heads = kv.heads;
  g.head_dim = kv.head_dim;
  g.block_ids = device_block_ids;
  g.blocks_per_page = BlocksPerPage(kv, tokens);
  return g;
}

internal::PageShape Shape(const DeviceEncodedPages& pages) {
  const ContainerLayout& l = pages.layout();
  internal::PageShape s;
  s.num_pages = pages.num_pages();
  s.tokens = l.tokens;
  s.channels = l.channels;
  s.chunk_len = l.tokens < l.chunk_tokens ? l.tokens : l.chunk_tokens;
  s.num_chunks = l.tokens / s.chunk_len;
  if (l.scheme.kind == SchemeKind::kLynx) {
    s.end_pair_bits = l.scheme.end_pair_bits;
    s.grid_max = cpu::EndGridMax(l.scheme.end_pair_bits);
    s.frame_spikes = PageFrameSpikes(l.scheme, l.tokens, l.chunk_tokens);
  }
  return s;
}

internal::Staging StagingOf(const DeviceEncodedPages& pages) {
  internal::Staging st;
  st.meta = pages.meta(0);
  st.meta_stride = pages.meta_stride();
  const ContainerLayout& l = pages.layout();
  if (l.scheme.kind == SchemeKind::kLynx) {
    const size_t chunk_values = static_cast<size_t>(NumChunks(l.tokens, l.chunk_tokens)) * l.channels;
    const size_t frame_values = static_cast<size_t>(PageFrameSpikes(l.scheme, l.tokens, l.chunk_tokens)) * l.channels;
    st.ends_offset = 8 * static_cast<size_t>(l.channels);
    st.frame_offset = st.ends_offset + cpu::EndPairBytes(chunk_values, l.scheme.end_pair_bits);
    st.tables_offset = st.frame_offset + 6 * frame_values;
    st.frame_sub = pages.frame_scratch();
    st.table_floats = static_cast<int>(LynxAnchorTableFloats(l.scheme));
    st.histogram = pages.histogram();
    if (st.histogram != nullptr) {  // the scratch's layout: see DeviceEncodedPages::Create
      const size_t n = static_cast<size_t>(pages.num_pages());
      st.exclusions = st.histogram + 256 * n;
    }
  }
  for (int i = 0; i < pages.layout().scheme.num_streams(); ++i) {
    st.codes[i] = pages.codes(i, 0);
    st.codes_stride[i] = pages.codes_stride(i);
  }
  return st;
}

// Whether pages of layouts a and b have the same staging: scheme, dims, chunk, curve and flags.
bool SamePageShape(const ContainerLayout& a, const ContainerLayout& b) {
  return a.scheme == b.scheme && a.tokens == b.tokens && a.channels == b.channels &&
         a.chunk_tokens == b.chunk_tokens && a.alpha == b.alpha && a.top_width == b.top_width &&
         a.flags == b.flags;
}

// Uploads a host block-id list into `holder` (kept when it is large enough).
absl::StatusOr<const int32_t*> UploadBlockIds(absl::Span<const int32_t> ids, const PagedKvView& kv,
                                              std::unique_ptr<DeviceBuffer>& holder, CudaStream stream) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kv.num_blocks) {
      return absl::OutOfRangeError(
          absl::StrCat("block id ", ids[i], " at position ", i, " is outside [0, ", kv.num_blocks, ")"));
    }
  }
  if (holder == nullptr || holder->size() < ids.size() * sizeof(int32_t)) {
    holder.reset();
    KVT_ASSIGN_OR_RETURN(holder, DeviceBuffer::Create(ids.size() * sizeof(int32_t)));
  }
  KVT_RETURN_IF_ERROR(CopyToDevice(holder->get(), ids.data(), ids.size() * sizeof(int32_t), stream));
  return static_cast<const int32_t*>(holder->get());
}

absl::StatusOr<int> PagesFromBlockIds(const PagedKvView& kv, int tokens, absl::Span<const int32_t> ids) {
  const int bpp = BlocksPerPage(kv, tokens);
  if (ids.empty() || ids.size() % bpp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(ids.size(), " block ids are not a positive whole number of pages of ",
                                                   bpp, " blocks (", tokens, " tokens, ", kv.block_tokens,
                                                   " per block)"));
  }
  return static_cast<int>(ids.size() / bpp);
}

// The key of a page layout's encode tables (DeviceEncodedPages::StageTables); a decode adds its stages and rule.
DeviceEncodedPages::TablesKey TablesKeyOf(const ContainerLayout& l) {
  DeviceEncodedPages::TablesKey key;
  key.kind = l.scheme.kind;
  key.spike_reserve = l.scheme.spike_reserve;
  for (int i = 0; i < l.scheme.num_streams() && i < kMaxStreams; ++i) key.stage_bits[i] = l.scheme.stage_bits[i];
  key.alpha_bits = absl::bit_cast<uint32_t>(l.alpha);
  key.top_width_bits = absl::bit_cast<uint32_t>(l.top_width);
  return key;
}

}  // namespace


int BlocksPerPage(const PagedKvView& kv, int tokens) {
  return kv.block_tokens <= 0 ? 0 : (tokens + kv.block_tokens - 1) / kv.block_tokens;
}

absl::StatusOr<std::unique_ptr<DeviceEncodedPages>> DeviceEncodedPages::Create(const ContainerLayout& shape,
                                                                               int num_pages) {
  KVT_RETURN_IF_ERROR(ValidateScheme(shape.scheme));
  KVT_RETURN_IF_ERROR(ValidatePageDims(shape.tokens, shape.channels, shape.chunk_tokens));
  if (num_pages <= 0) return absl::InvalidArgumentError(absl::StrCat("num_pages must be positive, got ", num_pages));
  std::unique_ptr<DeviceEncodedPages> p(new DeviceEncodedPages());
  p->layout_ = shape;
  ComputeLayout(p->layout_);
  p->num_pages_ = num_pages;
  p->capacity_ = num_pages;
  p->meta_bytes_ = MetaBytes(p->layout_);
  p->meta_stride_ = RoundUp(p->meta_bytes_);
  for (int i = 0; i < shape.scheme.num_streams(); ++i) {
    p->codes_bytes_[i] = CodesBytes(p->layout_, i);
    const size_t payload = p->codes_bytes_[i] + (i == 0 ? p->meta_bytes_ : 0);
    if (payload != StreamPayloadBytes(shape.scheme, i, shape.tokens, shape.channels, shape.chunk_tokens)) {
      return absl::InternalError(absl::StrCat("GPU staging of stream ", i, " (", payload,
                                              " bytes) disagrees with the container layout"));
    }
    p->codes_stride_[i] = RoundUp(p->codes_bytes_[i]);
  }
  p->LayOut();
  KVT_ASSIGN_OR_RETURN(p->buffer_, DeviceBuffer::Create(p->used_bytes()));
  if (shape.scheme.kind == SchemeKind::kLynx && shape.scheme.num_streams() > 1) {
    // The general encoder's anchor-table scratch, u32: 256 code counts per page and 256 per (page, partial
    // stage) for the exact-extremes rule's singles. Left unzeroed: its launch zeroes them. (The tile encoder
    // counts in shared memory: one block per page holds the tables' channels and writes the tables itself.)
    const size_t words = static_cast<size_t>(num_pages) * 256 * shape.scheme.num_streams();
    KVT_ASSIGN_OR_RETURN(p->histogram_, DeviceBuffer::Create(sizeof(uint32_t) * words));
  }
  if (const int spikes = PageFrameSpikes(shape.scheme, shape.tokens, shape.chunk_tokens); spikes > 0) {
    // The encoder's frame-spike replacements (Staging::frame_sub): a float per (page, spike, channel).
    const size_t floats = static_cast<size_t>(num_pages) * spikes * shape.channels;
    KVT_ASSIGN_OR_RETURN(p->frame_scratch_, DeviceBuffer::Create(sizeof(float) * floats));
  }
  KVT_ASSIGN_OR_RETURN(p->status_, DeviceBuffer::Create(sizeof(internal::DeviceStatus)));
  p->base_ = static_cast<uint8_t*>(p->buffer_->get());
  internal::DeviceStatus clean{internal::kNoNonFinite, 0, 0};
  KVT_RETURN_IF_ERROR(CopyToDevice(p->status_->get(), &clean, sizeof(clean)));
  KVT_RETURN_IF_ERROR(Synchronize());
  return p;
}

void DeviceEncodedPages::LayOut() {
  size_t offset = meta_stride_ * num_pages_;
  for (int i = 0; i < layout_.scheme.num_streams(); ++i) {
    codes_offset_[i] = offset;
    offset += codes_stride_[i] * num_pages_;
  }
}

size_t DeviceEncodedPages::used_bytes() const {
  size_t bytes = meta_stride_ * num_pages_;
  for (int i = 0; i < layout_.scheme.num_streams(); ++i) bytes += codes_stride_[i] * num_pages_;
  return bytes;
}

size_t DeviceEncodedPages::allocated_bytes() const { return buffer_->size(); }

absl::Status DeviceEncodedPages::SetNumPages(int num_pages) {
  if (num_pages < 1 || num_pages > capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", num_pages, " pages in staging for 1..", capacity_));
  }
  num_pages_ = num_pages;
  LayOut();
  return absl::OkStatus();
}

absl::StatusOr<DeviceEncodedPages::StagedTables> DeviceEncodedPages::StageTables(
    int slot, const TablesKey& key, size_t n, const std::function<void(void*)>& fill, CudaStream stream) const {
  std::vector<uint8_t>& host = tables_host_[slot];
  std::optional<TablesKey>& staged = tables_key_[slot];
  if (tables_[slot] == nullptr || tables_[slot]->size() != n) {
    staged.reset();
    KVT_ASSIGN_OR_RETURN(tables_[slot], DeviceBuffer::Create(n));
  }
  if (staged != key) {  // also when nothing is staged
    staged.reset();  // set again only once the upload is queued
    host.assign(n, 0);
    fill(host.data());
    KVT_RETURN_IF_ERROR(CopyToDevice(tables_[slot]->get(), host.data(), n, stream));
    staged = key;
  }
  return StagedTables{tables_[slot]->get(), host.data()};
}

size_t DeviceEncodedPages::payload_bytes() const {
  size_t per_page = meta_bytes_;
  for (int i = 0; i < layout_.scheme.num_streams(); ++i) per_page += codes_bytes_[i];
  return per_page * num_pages_;
}

uint8_t* DeviceEncodedPages::HostMirror() const {
  if (pinned_ != nullptr) return pinned_->data();
  if (!pageable_.empty()) return pageable_.data();
  if (pinned_host_) {
    absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> pinned = PinnedHostBuffer::Create(buffer_->size());
    if (pinned.ok()) {  // else pageable: slower copies, same results
      pinned_ = std::move(*pinned);
      std::memset(pinned_->data(), 0, pinned_->size());
      return pinned_->data();
    }
  }
  pageable_.assign(buffer_->size(), 0);
  return pageable_.data();
}

absl::Status DeviceEncodedPages::CopyContainersAsync(HostContainers& out, CudaStream stream) const {
  KVT_RETURN_IF_ERROR(out.Reset(layout_, num_pages_));
  // Per stream, one strided copy for all pages: stream 0 is the metadata then the codes, after the header.
  const size_t pitch = out.container_bytes();
  uint8_t* first = out.data(0);
  KVT_RETURN_IF_ERROR(CopyToHost2D(first + layout_.header_bytes, pitch, base_, meta_stride_, meta_bytes_, num_pages_,
                                   stream));
  for (int i = 0; i < layout_.scheme.num_streams(); ++i) {
    const size_t at = layout_.stream_offset[i] + (i == 0 ? layout_.header_bytes + meta_bytes_ : 0);
    KVT_RETURN_IF_ERROR(CopyToHost2D(first + at, pitch, base_ + codes_offset_[i], codes_stride_[i], codes_bytes_[i],
                                     num_pages_, stream));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EncodedPage>> DeviceEncodedPages::ToContainers(CudaStream stream) const {
  if (containers_ == nullptr) containers_ = std::make_unique<HostContainers>(pinned_host_);
  KVT_RETURN_IF_ERROR(CopyContainersAsync(*containers_, stream));
  KVT_RETURN_IF_ERROR(Synchronize(stream));
  std::vector<EncodedPage> pages(num_pages_);
  for (int p = 0; p < num_pages_; ++p) {
    containers_->Seal(p);
    const absl::Span<const uint8_t> c = containers_->container(p);
    pages[p].layout = containers_->layout(p);
    pages[p].bytes.assign(c.begin(), c.end());
  }
  return pages;
}

namespace {

// Checks container `p` of a batch of `layout`'s shape as DecodePage would: header, dims, length, and the CRCs of
// streams [0, stages).
absl::Status CheckBatchContainer(const ContainerLayout& layout, int p, absl::Span<const uint8_t> c, int stages) {
  KVT_ASSIGN_OR_RETURN(ContainerLayout l, ParseContainerHeader(c));
  if (!SamePageShape(l, layout)) {
    return absl::InvalidArgumentError(absl::StrCat("container ", p, " (", l.scheme.Name(), ", ", l.tokens, " x ",
                                                   l.channels, ") does not match the batch (", layout.scheme.Name(),
                                                   ", ", layout.tokens, " x ", layout.channels, ")"));
  }
  if (absl::Status s = CheckContainerStreams(l, c, stages); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("batch page ", p, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckStages(const Scheme& scheme, int stages) {
  if (stages < 1 || stages > scheme.num_streams()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stages ", stages, " outside 1..", scheme.num_streams(), " for scheme ", scheme.Name()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DeviceEncodedPages::FromContainers(absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                                                CudaStream stream) {
  if (static_cast<int>(containers.size()) != num_pages_) {
    return absl::InvalidArgumentError(
        absl::StrCat(containers.size(), " containers for a batch of ", num_pages_, " pages"));
  }
  KVT_RETURN_IF_ERROR(CheckStages(layout_.scheme, stages));
  uint8_t* host = HostMirror();
  for (int p = 0; p < num_pages_; ++p) {
    const absl::Span<const uint8_t> c = containers[p];
    KVT_RETURN_IF_ERROR(CheckBatchContainer(layout_, p, c, stages));
    for (int i = 0; i < stages; ++i) {
      const uint8_t* payload = c.data() + layout_.stream_offset[i] + (i == 0 ? layout_.header_bytes : 0);
      if (i == 0) {
        std::memcpy(host + p * meta_stride_, payload, meta_bytes_);
        payload += meta_bytes_;
      }
      std::memcpy(host + codes_offset_[i] + p * codes_stride_[i], payload, codes_bytes_[i]);
    }
  }
  // The metadata and streams [0, stages) lie first (LayOut): an anchor decode uploads no residual bytes.
  const size_t upload = codes_offset_[stages - 1] + codes_stride_[stages - 1] * num_pages_;
  KVT_RETURN_IF_ERROR(CopyToDevice(buffer_->get(), host, upload, stream));
  return Synchronize(stream);
}

absl::Status DeviceEncodedPages::UploadContainers(absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                                                  CudaStream stream, const PageLoop& check_loop) {
  if (static_cast<int>(containers.size()) != num_pages_) {
    return absl::InvalidArgumentError(
        absl::StrCat(containers.size(), " containers for a batch of ", num_pages_, " pages"));
  }
  KVT_RETURN_IF_ERROR(CheckStages(layout_.scheme, stages));
  std::vector<absl::Status> checked(containers.size());
  const auto check = [&](size_t p) {
    checked[p] = CheckBatchContainer(layout_, static_cast<int>(p), containers[p], stages);
  };
  if (check_loop) {
    check_loop(containers.size(), check);
  } else {
    for (size_t p = 0; p < containers.size(); ++p) check(p);
  }
  for (const absl::Status& st : checked) KVT_RETURN_IF_ERROR(st);
  // Runs of containers that lie back to back go as one strided copy per stream (metadata, then each stream's
  // codes), each row one container's range.
  const size_t pitch = layout_.total_bytes;
  for (int first = 0; first < num_pages_;) {
    int end = first + 1;
    while (end < num_pages_ && containers[end].data() == containers[end - 1].data() + pitch) ++end;
    const uint8_t* c = containers[first].data();
    const size_t rows = static_cast<size_t>(end - first);
    KVT_RETURN_IF_ERROR(CopyToDevice2D(base_ + first * meta_stride_, meta_stride_, c + layout_.header_bytes, pitch,
                                       meta_bytes_, rows, stream));
    for (int i = 0; i < stages; ++i) {
      const size_t at = layout_.stream_offset[i] + (i == 0 ? layout_.header_bytes + meta_bytes_ : 0);
      KVT_RETURN_IF_ERROR(CopyToDevice2D(base_ + codes_offset_[i] + first * codes_stride_[i], codes_stride_[i], c + at,
                                         pitch, codes_bytes_[i], rows, stream));
    }
    first = end;
  }
  return absl::OkStatus();
}

namespace {

// Queues on `stream` the status word's reset to "no error" (all zero), so that the launch after it reports only
// its own errors and CheckDeviceStatus need not clear it (which took a second wait for the device on every call).
absl::Status ClearDeviceStatusAsync(const DeviceEncodedPages& pages, CudaStream stream) {
  static_assert(internal::kNoNonFinite == 0, "a zeroed status word says: no error");
  return FillDevice(pages.status_word(), 0, sizeof(internal::DeviceStatus), stream);
}

}  // namespace

// The launchers build the tables in StageTables' host copy, a std::vector's bytes, by placement new.
static_assert(alignof(internal::LynxDeviceTables) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "new aligns them");

absl::Status EncodePagesCudaAsync(const CodecOptions& options, const PagedKvView& src, const int32_t* device_block_ids,
                                  DeviceEncodedPages& out, CudaStream stream) {
  KVT_RETURN_IF_ERROR(options.Validate());
  const ContainerLayout& l = out.layout();
  if (out.num_pages() != out.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat("an encode needs its staging laid out at capacity (", out.capacity(),
                                                   " pages), not at ", out.num_pages(), " (SetNumPages is for decodes)"));
  }
  KVT_RETURN_IF_ERROR(SpikeUnimplemented(l.scheme));
  KVT_RETURN_IF_ERROR(ValidateKv(src, l.tokens, "source KV"));
  if (src.channels() != l.channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("source KV has ", src.channels(), " channels but the pages have ", l.channels));
  }
  // The header fields these options give such a page must be the batch's.
  const ContainerLayout want = PageLayoutFor(l.scheme, options, l.tokens, l.channels);
  if (want.chunk_tokens != l.chunk_tokens || want.alpha != l.alpha || want.top_width != l.top_width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options (chunk_tokens ", want.chunk_tokens, ", alpha ", want.alpha, ", top_width ", want.top_width,
        ") disagree with the batch's (", l.chunk_tokens, ", ", l.alpha, ", ", l.top_width, ")"));
  }
  if (device_block_ids == nullptr) return absl::InvalidArgumentError("no block ids");
  KVT_RETURN_IF_ERROR(ClearDeviceStatusAsync(out, stream));
  const internal::LynxDeviceTables* tp = nullptr;
  const internal::LynxDeviceTables* host_tables = nullptr;
  if (l.scheme.kind == SchemeKind::kLynx) {
    KVT_ASSIGN_OR_RETURN(const DeviceEncodedPages::StagedTables staged,
                         out.StageTables(0, TablesKeyOf(l), sizeof(internal::LynxDeviceTables),
                                         [&l](void* bytes) {
                                           auto* tables = new (bytes) internal::LynxDeviceTables;
                                           const auto t =
                                               cpu::GetLynxTables(l.alpha, l.top_width, l.scheme.total_code_bits());
                                           internal::FillLynxTables(*t, *tables);
                                           internal::FillAnchorFallback(*t, l.scheme, *tables);
                                         },
                                         stream));
    tp = static_cast<const internal::LynxDeviceTables*>(staged.device);
    host_tables = std::launder(static_cast<const internal::LynxDeviceTables*>(staged.host));
  }
  return internal::LaunchEncode(l.scheme, options.centering == Centering::kMean, options.exact_extremes, tp,
                                host_tables, Geometry(src, l.tokens, device_block_ids),
                                Shape(out), StagingOf(out),
                                static_cast<internal::DeviceStatus*>(out.status_word()), stream.handle);
}

absl::Status DecodePagesCudaAsync(const DeviceEncodedPages& in, int stages, const CodecOptions& options,
                                  const PagedKvView& dst, const int32_t* device_block_ids, CudaStream stream) {
  const AnchorRule rule = options.anchor_rule;
  const ContainerLayout& l = in.layout();
  KVT_RETURN_IF_ERROR(SpikeUnimplemented(l.scheme));
  KVT_RETURN_IF_ERROR(ValidateKv(dst, l.tokens, "destination KV"));
  if (stages < 1 || stages > l.scheme.num_streams()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stages ", stages, " outside 1..", l.scheme.num_streams(), " for scheme ", l.scheme.Name()));
  }
  if (dst.channels() != l.channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("destination KV has ", dst.channels(), " channels but the pages have ", l.channels));
  }
  if (device_block_ids == nullptr) return absl::InvalidArgumentError("no block ids");
  KVT_RETURN_IF_ERROR(ClearDeviceStatusAsync(in, stream));
  const internal::LynxDeviceTables* tp = nullptr;
  if (l.scheme.kind == SchemeKind::kLynx) {
    auto fill = [&l, stages, rule](void* bytes) {
      auto& tables = *new (bytes) internal::LynxDeviceTables;
      const int bits = l.scheme.total_code_bits();
      const auto t = cpu::GetLynxTables(l.alpha, l.top_width, bits);
      internal::FillLynxTables(*t, tables);
      int known = 0;
      for (int i = 0; i < stages; ++i) known += l.scheme.stage_bits[i];
      const std::vector<float>& dec = t->decode_table(known, rule);
      for (size_t i = 0; i < dec.size(); ++i) tables.decode[i] = dec[i];
      if (rule == AnchorRule::kConditionalMean && known < bits) {
        // The page's stored table of this stage: the concatenated tables of the stages before it come first.
        tables.decode_from_page = 1;
        int k = 0;
        for (int i = 0; i + 1 < stages; ++i) {
          k += l.scheme.stage_bits[i];
          tables.table_first += 1 << (k - 1);
        }
      }
    };
    DeviceEncodedPages::TablesKey key = TablesKeyOf(l);
    key.decode_stages = stages;
    key.decode_rule = static_cast<int>(rule);
    KVT_ASSIGN_OR_RETURN(const DeviceEncodedPages::StagedTables staged,
                         in.StageTables(1, key, sizeof(internal::LynxDeviceTables), fill, stream));
    tp = static_cast<const internal::LynxDeviceTables*>(staged.device);
  }
  const internal::KvGeometry geometry = Geometry(dst, l.tokens, device_block_ids);
  return internal::LaunchDecode(l.scheme, stages, options.exact_extremes, tp, StagingOf(in), Shape(in), geometry,
                                static_cast<internal::DeviceStatus*>(in.status_word()), stream.handle);
}

absl::Status CheckDeviceStatus(const DeviceEncodedPages& pages, CudaStream stream) {
  internal::DeviceStatus st;
  // Into pageable memory: the copy returns once it is done, after all the stream's work before it.
  KVT_RETURN_IF_ERROR(CopyToHost(&st, pages.status_word(), sizeof(st), stream));
  KVT_RETURN_IF_ERROR(Synchronize(stream));
  if (st.errors & internal::kErrBadBlockId) {
    return absl::OutOfRangeError("a block id is outside the KV cache's blocks");
  }
  if (st.non_finite_complement != internal::kNoNonFinite) {
    const unsigned long long first_non_finite = ~st.non_finite_complement;
    const ContainerLayout& l = pages.layout();
    const unsigned long long per_page = static_cast<unsigned long long>(l.tokens) * l.channels;
    const unsigned long long page = first_non_finite / per_page;
    const unsigned long long rest = first_non_finite % per_page;
    return absl::InvalidArgumentError(absl::StrCat("page ", page, " value at (token ", rest / l.channels,
                                                   ", channel ", rest % l.channels,
                                                   ") is NaN or Inf: NaN/Inf cannot be encoded"));
  }
  if (st.errors & internal::kErrBadChannelRange) {
    return absl::DataLossError("lynx container: bad channel range (non-finite or lo > hi)");
  }
  if (st.errors & internal::kErrBadChunkEnds) {
    return absl::DataLossError("lynx container: a chunk end pair index is past the grid");
  }
  if (st.errors & internal::kErrBadAnchorTable) {
    return absl::DataLossError("lynx container: an anchor table entry is outside [0, 1]");
  }
  if (st.errors & internal::kErrBadFrameSpike) {
    return absl::DataLossError(
        "lynx container: a frame spike is not finite, past the page or out of token order in its channel");
  }
  if (st.errors & internal::kErrBadFp16Meta) {
    return absl::DataLossError(absl::StrCat("int", pages.layout().scheme.stage_bits[0],
                                            " container: non-finite fp16 metadata"));
  }
  if (st.errors & internal::kErrBadFp8Scale) return absl::DataLossError("fp8 container: bad scale");
  if (st.errors & internal::kErrNonFiniteCode) {
    return absl::DataLossError(absl::StrCat(pages.layout().scheme.Name(), " container: NaN/Inf code or value"));
  }
  return absl::OkStatus();
}

namespace {

// The work EncodePagesCudaWith and EncodePagesCudaInto share: the pages' encode queued into `staging` (made to
// fit) on `stream`; the caller checks the device's errors (CheckDeviceStatus) before using the pages.
absl::StatusOr<const DeviceEncodedPages*> EncodeIntoStaging(PageStaging& staging, const Scheme& scheme,
                                                           const CodecOptions& options, const PagedKvView& src,
                                                           int tokens_per_page, absl::Span<const int32_t> block_ids,
                                                           CudaStream stream) {
  KVT_RETURN_IF_ERROR(options.Validate());
  KVT_RETURN_IF_ERROR(ValidateScheme(scheme));
  KVT_RETURN_IF_ERROR(SpikeUnimplemented(scheme));
  KVT_RETURN_IF_ERROR(ValidateKv(src, tokens_per_page, "source KV"));
  KVT_RETURN_IF_ERROR(
      ValidatePageDims(tokens_per_page, src.channels(), ResolveChunkTokens(scheme, options.chunk_tokens)));
  KVT_ASSIGN_OR_RETURN(int num_pages, PagesFromBlockIds(src, tokens_per_page, block_ids));
  const ContainerLayout layout = PageLayoutFor(scheme, options, tokens_per_page, src.channels());
  if (!staging.Fits(layout, num_pages)) {
    staging.pages.reset();
    KVT_ASSIGN_OR_RETURN(staging.pages, DeviceEncodedPages::Create(layout, num_pages));
    staging.pages->set_pinned_host(staging.pinned_host);
  }
  DeviceEncodedPages& out = *staging.pages;
  KVT_RETURN_IF_ERROR(out.SetNumPages(num_pages));  // a decode may have laid out a smaller batch
  KVT_ASSIGN_OR_RETURN(const int32_t* d_ids, UploadBlockIds(block_ids, src, staging.block_ids, stream));
  KVT_RETURN_IF_ERROR(EncodePagesCudaAsync(options, src, d_ids, out, stream));
  return &out;
}

absl::StatusOr<std::vector<EncodedPage>> EncodeWithStaging(PageStaging& staging, const Scheme& scheme,
                                                           const CodecOptions& options, const PagedKvView& src,
                                                           int tokens_per_page, absl::Span<const int32_t> block_ids,
                                                           CudaStream stream) {
  KVT_ASSIGN_OR_RETURN(const DeviceEncodedPages* pages,
                       EncodeIntoStaging(staging, scheme, options, src, tokens_per_page, block_ids, stream));
  KVT_RETURN_IF_ERROR(CheckDeviceStatus(*pages, stream));
  return pages->ToContainers(stream);
}

absl::Status EncodeWithStagingInto(PageStaging& staging, HostContainers& out, const Scheme& scheme,
                                   const CodecOptions& options, const PagedKvView& src, int tokens_per_page,
                                   absl::Span<const int32_t> block_ids, CudaStream stream, const PageLoop& seal_loop) {
  KVT_ASSIGN_OR_RETURN(const DeviceEncodedPages* pages,
                       EncodeIntoStaging(staging, scheme, options, src, tokens_per_page, block_ids, stream));
  // The copy is queued behind the encode, and the status read behind the copy: one wait for the device covers
  // all three (a failed encode's copied bytes are never sealed).
  KVT_RETURN_IF_ERROR(pages->CopyContainersAsync(out, stream));
  KVT_RETURN_IF_ERROR(CheckDeviceStatus(*pages, stream));
  const auto seal = [&out](size_t p) { out.Seal(static_cast<int>(p)); };
  if (seal_loop) {
    seal_loop(out.num_pages(), seal);
  } else {
    for (int p = 0; p < out.num_pages(); ++p) seal(p);
  }
  return absl::OkStatus();
}

// DecodePagesCudaWith's work (and DecodeHostContainersCudaWith's, with `direct`: the pages uploaded straight from
// the caller's memory, checked on `check_loop`).
absl::Status DecodeWithStaging(PageStaging& staging, absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                               const CodecOptions& options, const PagedKvView& dst, absl::Span<const int32_t> block_ids,
                               CudaStream stream, bool direct = false, const PageLoop& check_loop = nullptr) {
  KVT_RETURN_IF_ERROR(options.Validate());
  if (containers.empty()) return absl::InvalidArgumentError("no containers to decode");
  KVT_ASSIGN_OR_RETURN(ContainerLayout layout, ParseContainerHeader(containers[0]));
  KVT_RETURN_IF_ERROR(SpikeUnimplemented(layout.scheme));
  KVT_RETURN_IF_ERROR(ValidateKv(dst, layout.tokens, "destination KV"));
  KVT_ASSIGN_OR_RETURN(int num_pages, PagesFromBlockIds(dst, layout.tokens, block_ids));
  if (num_pages != static_cast<int>(containers.size())) {
    return absl::InvalidArgumentError(absl::StrCat(block_ids.size(), " block ids name ", num_pages, " pages but ",
                                                   containers.size(), " containers were given"));
  }
  if (!staging.FitsUpTo(layout, num_pages)) {
    // Grown batches of one shape double the staging, so a run of growing batches reallocates a few times only.
    int capacity = num_pages;
    if (staging.pages != nullptr && SamePageShape(staging.pages->layout(), layout)) {
      capacity = std::max(num_pages, 2 * staging.pages->capacity());
    }
    staging.pages.reset();
    KVT_ASSIGN_OR_RETURN(staging.pages, DeviceEncodedPages::Create(layout, capacity));
    staging.pages->set_pinned_host(staging.pinned_host);
  }
  DeviceEncodedPages& in = *staging.pages;
  KVT_RETURN_IF_ERROR(in.SetNumPages(num_pages));
  if (direct) {
    KVT_RETURN_IF_ERROR(in.UploadContainers(containers, stages, stream, check_loop));
  } else {
    KVT_RETURN_IF_ERROR(in.FromContainers(containers, stages, stream));
  }
  KVT_ASSIGN_OR_RETURN(const int32_t* d_ids, UploadBlockIds(block_ids, dst, staging.block_ids, stream));
  KVT_RETURN_IF_ERROR(DecodePagesCudaAsync(in, stages, options, dst, d_ids, stream));
  return CheckDeviceStatus(in, stream);
}

}  // namespace

absl::StatusOr<std::vector<EncodedPage>> EncodePagesCuda(const Scheme& scheme, const CodecOptions& options,
                                                         const PagedKvView& src, int tokens_per_page,
                                                         absl::Span<const int32_t> block_ids, CudaStream stream) {
  PageStaging staging;
  staging.pinned_host = false;  // one call: pinning would cost more than it saves
  return EncodePagesCudaWith(staging, scheme, options, src, tokens_per_page, block_ids, stream);
}

absl::StatusOr<std::vector<EncodedPage>> EncodePagesCudaWith(PageStaging& staging, const Scheme& scheme,
                                                             const CodecOptions& options, const PagedKvView& src,
                                                             int tokens_per_page, absl::Span<const int32_t> block_ids,
                                                             CudaStream stream) {
  absl::StatusOr<std::vector<EncodedPage>> pages =
      EncodeWithStaging(staging, scheme, options, src, tokens_per_page, block_ids, stream);
  if (!pages.ok()) staging.pages.reset();  // as DecodePagesCudaWith
  return pages;
}

absl::Status EncodePagesCudaInto(PageStaging& staging, HostContainers& out, const Scheme& scheme,
                                 const CodecOptions& options, const PagedKvView& src, int tokens_per_page,
                                 absl::Span<const int32_t> block_ids, CudaStream stream, const PageLoop& seal_loop) {
  absl::Status s =
      EncodeWithStagingInto(staging, out, scheme, options, src, tokens_per_page, block_ids, stream, seal_loop);
  if (!s.ok()) {
    Synchronize(stream).IgnoreError();  // no copy into `out` may still be in flight when the caller reuses it
    staging.pages.reset();              // as EncodePagesCudaWith
  }
  return s;
}

absl::Status DecodePagesCuda(absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                             const CodecOptions& options, const PagedKvView& dst, absl::Span<const int32_t> block_ids,
                             CudaStream stream) {
  PageStaging staging;
  staging.pinned_host = false;  // one call: pinning would cost more than it saves
  return DecodePagesCudaWith(staging, containers, stages, options, dst, block_ids, stream);
}

bool PageStaging::Fits(const ContainerLayout& layout, int num_pages) const {
  return pages != nullptr && pages->capacity() == num_pages && SamePageShape(pages->layout(), layout);
}

bool PageStaging::FitsUpTo(const ContainerLayout& layout, int num_pages) const {
  return pages != nullptr && pages->capacity() >= num_pages && SamePageShape(pages->layout(), layout);
}

absl::Status DecodeHostContainersCudaWith(PageStaging& staging, absl::Span<const absl::Span<const uint8_t>> containers,
                                          int stages, const CodecOptions& options, const PagedKvView& dst,
                                          absl::Span<const int32_t> block_ids, CudaStream stream,
                                          const PageLoop& check_loop) {
  absl::Status st =
      DecodeWithStaging(staging, containers, stages, options, dst, block_ids, stream, /*direct=*/true, check_loop);
  if (!st.ok()) {
    Synchronize(stream).IgnoreError();  // no upload from the caller's memory may still be in flight
    staging.pages.reset();
  }
  return st;
}

absl::Status DecodePagesCudaWith(PageStaging& staging, absl::Span<const absl::Span<const uint8_t>> containers,
                                 int stages, const CodecOptions& options, const PagedKvView& dst,
                                 absl::Span<const int32_t> block_ids, CudaStream stream) {
  absl::Status st = DecodeWithStaging(staging, containers, stages, options, dst, block_ids, stream);
  // A failed call may leave the staging's status word or contents half-written: the next call starts afresh.
  if (!st.ok()) staging.pages.reset();
  return st;
}

}  // namespace kvt::codec::gpu
