// The RegionCodec of GPU regions (registered through CUDA IPC): the CUDA kernels (codec/gpu) encode a layer's pages
// straight out of the engine's paged blocks, the device copies the containers into one pooled pinned buffer by
// strided DMA and the worker pool seals them; decodes upload a batch of pages straight from the decode inbox
// (pinned) and write the engine's blocks in place. Each encode group and decode batch takes one of at most
// kMaxGpuSlots (stream, staging) slots per device, waiting for one when all are busy, so that concurrent
// requests never allocate device memory per call. Thread-safe.
#ifndef KVT_SERVER_GPU_REGION_CODEC_H_
#define KVT_SERVER_GPU_REGION_CODEC_H_

#include <memory>

#include "absl/status/status.h"
#include "server/region_codec.h"

namespace kvt::server {

// Slots (stream and page staging) per device: the most GPU encodes and decode batches that run at once.
inline constexpr int kMaxGpuSlots = 8;
// The most pages one GPU decode batch takes: a layer's K or V of up to 16k tokens at 256-token pages.
inline constexpr size_t kMaxGpuDecodeBatch = 64;
// Codec threads that help seal an encoded group or check a decode batch (a page's CRCs take ~20 us): enough to
// finish a layer in a fraction of a millisecond, few enough not to take the cores the data plane's threads run on.
inline constexpr size_t kMaxGpuPageHelpers = 8;

// Whether the GPU path can carry `plan` for a region of `layout`: every page starts on an engine block boundary
// (the kernels read and write whole blocks) and the scheme has a kernel (spike reserving has none yet). The
// message says which page or scheme does not fit.
absl::Status CheckGpuPlan(const kv::KvLayout& layout, const kv::TransferPlan& plan);

// The chunk a request from a GPU region of `block_tokens`-token blocks is planned with: `chunk_tokens` when the
// daemon was told one, else the scheme's own (codec::ResolveChunkTokens), widened to the least common multiple
// with the block when the block does not divide it (at most 256 tokens), so that every page, the tails' included,
// starts on a block: lynx's 16-token chunks in a region of 32-token blocks are planned as 32-token chunks.
int GpuPlanChunkTokens(const codec::Scheme& scheme, int chunk_tokens, uint32_t block_tokens);

// The codec of `region` (on_gpu). The decode side must have checked that the region and the source share some
// heads: decodes write those (re-sliced through a scratch when the ranges differ).
std::unique_ptr<RegionCodec> MakeGpuRegionCodec(const Region& region, const RegionCodecOptions& options);

}  // namespace kvt::server

#endif  // KVT_SERVER_GPU_REGION_CODEC_H_
