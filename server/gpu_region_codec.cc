#include "server/gpu_region_codec.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "codec/gpu/codec_cuda.h"
#include "codec/gpu/host_containers.h"
#include "common/cuda_ipc.h"
#include "common/cuda_util.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "numerics/dtype.h"

namespace kvt::server {
namespace {

codec::gpu::PagedKvView View(const Region& region, uint32_t layer, uint32_t kind) {
  const kv::KvLayoutSpec& s = region.layout().spec();
  codec::gpu::PagedKvView v;
  v.data = static_cast<uint8_t*>(region.device_data()) + s.layer_stride_bytes * layer + s.kv_stride_bytes * kind;
  v.dtype = s.dtype;
  v.layout = s.order;
  v.num_blocks = static_cast<int>(s.num_blocks);
  v.block_tokens = static_cast<int>(s.block_tokens);
  v.heads = static_cast<int>(s.num_kv_heads);
  v.head_dim = static_cast<int>(s.head_dim);
  return v;
}

// The engine blocks page `page` covers, as the kernels take them.
std::vector<int32_t> PageBlocks(const kv::KvLayout& layout, absl::Span<const uint32_t> block_ids, const kv::PageSpec& page) {
  const uint32_t bt = layout.spec().block_tokens;
  std::vector<int32_t> ids;
  for (uint32_t b = page.first_token / bt; b < (page.first_token + page.tokens + bt - 1) / bt; ++b) {
    ids.push_back(static_cast<int32_t>(block_ids[b]));
  }
  return ids;
}

// What one encode or decode call needs on a device beyond the region: a stream and the page staging (device
// buffers and their pinned host mirror), kept between calls because allocating them per page (cudaMalloc, and
// cudaFree, which waits for the whole device) cost more than the decode. A thread takes a slot for one call and
// gives it back; slots are per device.
struct GpuSlot {
  int device = 0;
  std::unique_ptr<OwnedCudaStream> stream;
  codec::gpu::PageStaging staging;
  // Where a decode lands first when the region holds fewer heads than the pages (ReslicedDecode); grown on demand.
  std::unique_ptr<DeviceBuffer> reslice;
};

// A slot lent for one call: it goes back to GpuSlots when the lease ends.
struct ReturnSlot {
  void operator()(GpuSlot* slot) const;
};
using SlotLease = std::unique_ptr<GpuSlot, ReturnSlot>;

class GpuSlots {
 public:
  // The process's slots (never destroyed: the CUDA runtime may be gone at exit).
  static GpuSlots& Get() {
    static GpuSlots* slots = new GpuSlots();
    return *slots;
  }

  // A slot of device `device` (current for the caller), waiting while kMaxGpuSlots of its slots are lent out
  // (kMaxGpuSlots - kSlotsForUrgent for a call that is not `urgent`, so that an anchor decode or an encode never
  // waits behind residual decodes): a free one whose staging `fits` (a request's pages come in up to three lengths,
  // and each would otherwise reallocate the others' staging), else the most recently freed one, else a new one.
  absl::StatusOr<SlotLease> Acquire(int device, const std::function<bool(const codec::gpu::PageStaging&)>& fits,
                                    bool urgent) {
    {
      kvt::MutexLock lock(&mu_);
      const int limit = urgent ? kMaxGpuSlots : kMaxGpuSlots - kSlotsForUrgent;
      mu_.Await([this, device, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_use_[device] < limit; });
      ++in_use_[device];
      std::vector<std::unique_ptr<GpuSlot>>& free = free_[device];
      if (!free.empty()) {
        auto it = std::find_if(free.rbegin(), free.rend(), [&](const auto& s) { return fits(s->staging); });
        auto pick = it == free.rend() ? std::prev(free.end()) : std::prev(it.base());
        SlotLease slot(pick->release());
        free.erase(pick);
        return slot;
      }
    }
    auto slot = std::make_unique<GpuSlot>();
    slot->device = device;
    absl::StatusOr<std::unique_ptr<OwnedCudaStream>> stream = OwnedCudaStream::Create();
    if (!stream.ok()) {
      kvt::MutexLock lock(&mu_);
      --in_use_[device];
      return stream.status();
    }
    slot->stream = *std::move(stream);
    return SlotLease(slot.release());
  }

  // Keeps the slot for the next caller unless the kept staging of the device would pass kMaxKeptBytes (device
  // memory the engine cannot use, and as much pinned host memory); such a slot is freed by the caller's thread,
  // outside the lock.
  void Release(std::unique_ptr<GpuSlot> slot) {
    {
      kvt::MutexLock lock(&mu_);
      --in_use_[slot->device];
      std::vector<std::unique_ptr<GpuSlot>>& free = free_[slot->device];
      size_t kept = StagingBytes(*slot);
      for (const auto& f : free) kept += StagingBytes(*f);
      if (kept <= kMaxKeptBytes) {
        free.push_back(std::move(slot));
        return;
      }
    }
    slot.reset();
  }

 private:
  static constexpr size_t kMaxKeptBytes = size_t{512} << 20;
  static constexpr int kSlotsForUrgent = 2;
  static size_t StagingBytes(const GpuSlot& slot) {
    return (slot.staging.pages == nullptr ? 0 : slot.staging.pages->allocated_bytes()) +
           (slot.reslice == nullptr ? 0 : slot.reslice->size());
  }
  kvt::Mutex mu_;
  std::map<int, std::vector<std::unique_ptr<GpuSlot>>> free_ ABSL_GUARDED_BY(mu_);
  std::map<int, int> in_use_ ABSL_GUARDED_BY(mu_);
};

void ReturnSlot::operator()(GpuSlot* slot) const { GpuSlots::Get().Release(std::unique_ptr<GpuSlot>(slot)); }

}  // namespace

int GpuPlanChunkTokens(const codec::Scheme& scheme, int chunk_tokens, uint32_t block_tokens) {
  if (chunk_tokens != 0) return chunk_tokens;
  const int chunk = codec::ResolveChunkTokens(scheme, 0);
  if (block_tokens == 0 || chunk % block_tokens == 0) return chunk;
  const uint64_t lcm = std::lcm<uint64_t>(chunk, block_tokens);
  return lcm <= 256 ? static_cast<int>(lcm) : chunk;  // else CheckGpuPlan says why the plan does not fit
}

absl::Status CheckGpuPlan(const kv::KvLayout& layout, const kv::TransferPlan& plan) {
  if (plan.scheme.spike_reserve) {
    return absl::UnimplementedError(absl::StrFormat(
        "scheme %s: spike reserving has no GPU kernel yet; use it with host-memory regions", plan.scheme.Name()));
  }
  const uint32_t bt = layout.spec().block_tokens;
  for (const auto& layer : plan.layers) {
    for (const kv::PlannedPage& p : layer) {
      if (p.spec.first_token % bt != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "GPU regions need pages that start on engine blocks: a page starts at token %d, blocks hold %d tokens "
            "(use a block size that divides the codec's %d-token chunks)",
            p.spec.first_token, bt, plan.chunk_tokens));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

class GpuRegionCodec final : public RegionCodec {
 public:
  GpuRegionCodec(const Region& region, const RegionCodecOptions& options) : region_(region), options_(options) {}

  absl::StatusOr<EncodedLayer> EncodeLayer(absl::Span<const uint32_t> block_ids, absl::Span<const kv::PlannedPage> pages,
                                           const codec::Scheme& scheme, int chunk_tokens) override {
    KVT_RETURN_IF_ERROR(UseCudaDevice(region_.device()));
    codec::CodecOptions options;
    options.chunk_tokens = chunk_tokens;
    // One launch per (layer, kind, page length): the kernels take pages of one shape from one tensor.
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<size_t>> groups;
    size_t total = 0;
    for (size_t i = 0; i < pages.size(); ++i) {
      groups[{pages[i].spec.layer, pages[i].spec.kind, pages[i].spec.tokens}].push_back(i);
      total += pages[i].total_bytes();
    }
    // The whole layer in one pooled pinned buffer, each group's containers back to back in it.
    std::shared_ptr<HostBuffer> buffer = options_.buffers->Acquire(total, HostMemory::kPinned);
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat("no host memory for a %d-byte encoded layer", total));
    }
    WorkerPool* workers = options_.workers;
    const codec::gpu::PageLoop seal_loop = [workers](size_t n, const std::function<void(size_t)>& fn) {
      workers->ParallelFor(n, fn, kMaxGpuPageHelpers);
    };
    std::vector<std::vector<absl::Span<const uint8_t>>> streams(pages.size());
    size_t at = 0;
    for (const auto& [key, members] : groups) {
      const auto& [layer, kind, tokens] = key;
      const codec::gpu::PagedKvView view = View(region_, layer, kind);
      const codec::ContainerLayout shape =
          codec::PageLayoutFor(scheme, options, static_cast<int>(tokens), view.channels());
      const int n = static_cast<int>(members.size());
      KVT_ASSIGN_OR_RETURN(SlotLease slot,
                           GpuSlots::Get().Acquire(
                               region_.device(), [&](const auto& staging) { return staging.Fits(shape, n); },
                               /*urgent=*/true));
      std::vector<int32_t> ids;
      for (size_t i : members) {
        const std::vector<int32_t> page_ids = PageBlocks(region_.layout(), block_ids, pages[i].spec);
        ids.insert(ids.end(), page_ids.begin(), page_ids.end());
      }
      const size_t need = members.size() * pages[members[0]].total_bytes();
      codec::gpu::HostContainers out(absl::MakeSpan(buffer->data() + at, need), buffer->pinned());
      at += need;
      KVT_RETURN_IF_ERROR(codec::gpu::EncodePagesCudaInto(
          slot->staging, out, scheme, options, view, static_cast<int>(tokens), ids, slot->stream->get(), seal_loop));
      if (out.num_pages() != n) {
        return absl::InternalError(absl::StrFormat("GPU encode returned %d pages for %d", out.num_pages(), n));
      }
      for (int j = 0; j < n; ++j) {
        std::vector<absl::Span<const uint8_t>>& s = streams[members[j]];
        for (int k = 0; k < scheme.num_streams(); ++k) s.push_back(out.stream(j, k));
      }
    }
    return EncodedLayer(std::move(streams), std::move(buffer));
  }

  bool on_device() const override { return true; }
  HostMemory inbox_memory() const override { return HostMemory::kPinned; }
  size_t max_decode_batch() const override { return kMaxGpuDecodeBatch; }

  absl::Status DecodePages(absl::Span<const uint32_t> block_ids, absl::Span<const kv::PageSpec> pages,
                           absl::Span<const absl::Span<const uint8_t>> containers, int stages, bool urgent) override {
    if (pages.empty() || pages.size() != containers.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a GPU decode batch needs one container per page (%d pages, %d containers)", pages.size(),
                          containers.size()));
    }
    const kv::PageSpec& first = pages[0];
    std::vector<int32_t> ids;
    for (const kv::PageSpec& p : pages) {
      if (p.layer != first.layer || p.kind != first.kind || p.tokens != first.tokens) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "a GPU decode batch takes pages of one layer, kind and length: layer %d kind %d %d tokens after layer "
            "%d kind %d %d tokens",
            p.layer, p.kind, p.tokens, first.layer, first.kind, first.tokens));
      }
      const std::vector<int32_t> page_ids = PageBlocks(region_.layout(), block_ids, p);
      ids.insert(ids.end(), page_ids.begin(), page_ids.end());
    }
    KVT_RETURN_IF_ERROR(UseCudaDevice(region_.device()));
    // A slot already staging this shape, if one is free (a bad header is the codec's to report).
    const absl::StatusOr<codec::ContainerLayout> shape = codec::ParseContainerHeader(containers[0]);
    const int n = static_cast<int>(pages.size());
    KVT_ASSIGN_OR_RETURN(
        SlotLease slot,
        GpuSlots::Get().Acquire(
            region_.device(), [&](const auto& staging) { return shape.ok() && staging.FitsUpTo(*shape, n); }, urgent));
    WorkerPool* workers = options_.workers;
    const codec::gpu::PageLoop check_loop = [workers](size_t count, const std::function<void(size_t)>& fn) {
      workers->ParallelFor(count, fn, kMaxGpuPageHelpers);
    };
    const kv::KvLayoutSpec& dst = region_.layout().spec();
    if (options_.source_heads > 0 &&
        (options_.source_heads != dst.num_kv_heads || options_.source_head_begin != dst.head_begin)) {
      return ReslicedDecode(*slot, pages, containers, stages, ids, check_loop);
    }
    return codec::gpu::DecodeHostContainersCudaWith(slot->staging, containers, stages, codec::CodecOptions{},
                                                    View(region_, first.layer, first.kind), ids, slot->stream->get(),
                                                    check_loop);
  }

 private:
  // Scratch a slot keeps for ReslicedDecode: 64 MiB, or one page where a page is larger.
  static constexpr size_t kMaxResliceScratch = size_t{64} << 20;

  // The pages hold heads [source_head_begin, + source_heads) of the model and the region others (tensor-parallel
  // ranks of different sizes; the request checked that they share some): decode into blocks of the slot's
  // scratch shaped like the region's but with the source's heads, then copy each block's shared heads, valid
  // tokens only, into the region's block (one strided DMA per block), leaving the region's other heads as they
  // were. Synchronizes the slot's stream.
  absl::Status ReslicedDecode(GpuSlot& slot, absl::Span<const kv::PageSpec> pages,
                              absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                              absl::Span<const int32_t> ids, const codec::gpu::PageLoop& check_loop) {
    const kv::KvLayoutSpec& dst = region_.layout().spec();
    const size_t element = numerics::DTypeBytes(dst.dtype);
    const size_t bt = dst.block_tokens, hd = dst.head_dim;
    const size_t src_heads = options_.source_heads, dst_heads = dst.num_kv_heads;
    const size_t lo = std::max<size_t>(dst.head_begin, options_.source_head_begin);
    const size_t hi = std::min<size_t>(dst.head_begin + dst_heads, options_.source_head_begin + src_heads);
    if (lo >= hi) return absl::InternalError("a re-sliced decode whose source shares no head with the region");
    const size_t heads = hi - lo;
    const size_t from_head = lo - options_.source_head_begin, to_head = lo - dst.head_begin;
    const size_t scratch_block = bt * src_heads * hd * element;
    const size_t dst_block = bt * dst_heads * hd * element;
    // Pages of one batch have one length (DecodePages checks), so each takes the same number of blocks. The
    // scratch holds at most kMaxResliceScratch bytes (at least one page): a larger batch goes in rounds.
    const size_t page_blocks = ids.size() / pages.size();
    const size_t per_round = std::max<size_t>(1, kMaxResliceScratch / (page_blocks * scratch_block));
    const size_t need = std::min(pages.size(), per_round) * page_blocks * scratch_block;
    if (slot.reslice == nullptr || slot.reslice->size() < need) {
      slot.reslice.reset();
      KVT_ASSIGN_OR_RETURN(slot.reslice, DeviceBuffer::Create(need));
    }
    const codec::gpu::PagedKvView target = View(region_, pages[0].layer, pages[0].kind);
    codec::gpu::PagedKvView scratch = target;
    scratch.data = static_cast<uint8_t*>(slot.reslice->get());
    scratch.heads = static_cast<int>(src_heads);
    const CudaStream stream{slot.stream->get()};
    for (size_t first = 0; first < pages.size(); first += per_round) {
      const size_t n = std::min(per_round, pages.size() - first);
      scratch.num_blocks = static_cast<int>(n * page_blocks);
      std::vector<int32_t> scratch_ids(n * page_blocks);
      for (size_t j = 0; j < scratch_ids.size(); ++j) scratch_ids[j] = static_cast<int32_t>(j);
      KVT_RETURN_IF_ERROR(codec::gpu::DecodeHostContainersCudaWith(
          slot.staging, containers.subspan(first, n), stages, codec::CodecOptions{}, scratch, scratch_ids,
          slot.stream->get(), check_loop));
      absl::Status copied = absl::OkStatus();
      for (size_t p = 0; p < n && copied.ok(); ++p) {
        const kv::PageSpec& page = pages[first + p];
        for (size_t b = 0; b < page_blocks && copied.ok(); ++b) {
          const size_t tokens = std::min<size_t>(bt, page.tokens - b * bt);  // the page's last block may be partial
          const size_t j = p * page_blocks + b;
          const uint8_t* from = static_cast<const uint8_t*>(slot.reslice->get()) + j * scratch_block;
          uint8_t* to = static_cast<uint8_t*>(target.data) +
                        static_cast<size_t>(ids[(first * page_blocks) + j]) * dst_block;
          if (dst.order == numerics::BlockOrder::kNhd) {  // [tokens][heads][dim]: a row per token
            copied = CopyDeviceToDevice2D(to + to_head * hd * element, dst_heads * hd * element,
                                          from + from_head * hd * element, src_heads * hd * element,
                                          heads * hd * element, tokens, stream);
          } else {  // [heads][tokens][dim]: a row per head
            copied = CopyDeviceToDevice2D(to + to_head * bt * hd * element, bt * hd * element,
                                          from + from_head * bt * hd * element, bt * hd * element,
                                          tokens * hd * element, heads, stream);
          }
        }
      }
      // Wait for the copies already queued, on failure too: nothing may land after the request has ended.
      const absl::Status synced = ::kvt::Synchronize(stream);
      KVT_RETURN_IF_ERROR(copied);
      KVT_RETURN_IF_ERROR(synced);
    }
    return absl::OkStatus();
  }

  const Region& region_;
  const RegionCodecOptions options_;
};

}  // namespace

std::unique_ptr<RegionCodec> MakeGpuRegionCodec(const Region& region, const RegionCodecOptions& options) {
  return std::make_unique<GpuRegionCodec>(region, options);
}

}  // namespace kvt::server
