// The GPU path of the daemon (DESIGN.md 7): pages of a request encoded straight out of a GPU region's paged
// blocks by the CUDA kernels (codec/gpu), and decoded straight into them. The containers are byte-identical to
// the CPU path's, so a GPU prefill daemon and a CPU decode daemon (or the reverse) interoperate.
// Thread-safe: calls may come from several threads; each makes the region's device current for itself.
#ifndef KVT_SERVER_GPU_PAGES_H_
#define KVT_SERVER_GPU_PAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/codec.h"
#include "codec/gpu/codec_cuda.h"
#include "server/encoded_layer.h"
#include "server/region_registry.h"
#include "server/transfer_plan.h"

namespace kvt::server {

// Whether the GPU path can carry `plan` for a region of `layout`: every page starts on an engine block boundary
// (the kernels read and write whole blocks) and the scheme has a kernel (spike reserving has none yet). The
// message says which page or scheme does not fit.
absl::Status CheckGpuPlan(const KvLayout& layout, const TransferPlan& plan);

// Encodes `pages` (any mix of layers and kinds) of the request whose blocks are `block_ids` from `region`
// (on_gpu) into containers, page i of the result being pages[i]. The containers lie in pinned host buffers
// lent by a process-wide pool (gpu_pages.cc) until the result is destroyed; the device copies them there in
// container order and `seal_loop` (e.g. the worker pool) checksums each page, so the host never copies the
// payload. Each (layer, kind, page length) group takes a slot whose staging already has its shape, if one is free.
absl::StatusOr<EncodedLayer> EncodePagesOnGpu(const Region& region, absl::Span<const uint32_t> block_ids,
                                              absl::Span<const PlannedPage> pages, const codec::Scheme& scheme,
                                              int chunk_tokens, const codec::gpu::PageLoop& seal_loop = nullptr);

// Decodes `pages` (one layer and kind, one page length), page i from containers[i] with its first `stages`
// streams, into `region`'s blocks (all of the pages' heads: the GPU path does not re-slice heads): one upload,
// one launch and one synchronization for the batch. INVALID_ARGUMENT for an empty or mixed batch.
absl::Status DecodePagesOnGpu(const Region& region, absl::Span<const uint32_t> block_ids,
                              absl::Span<const PageSpec> pages, absl::Span<const absl::Span<const uint8_t>> containers,
                              int stages);

}  // namespace kvt::server

#endif  // KVT_SERVER_GPU_PAGES_H_
