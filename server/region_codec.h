// The daemon's device seam (docs/DAEMON.md, "Region codecs"): how a request's pages are encoded out of a registered
// region's blocks and decoded into them, by the host's codec for shared-memory regions (host_region_codec.h) or
// by the CUDA kernels for GPU regions (gpu_region_codec.h). The region decides which; the prefill and decode
// sides only call this interface. The containers are byte-identical either way, so a GPU daemon and a host daemon
// interoperate.
//
// Threading: a codec is made per request and its methods may be called from several threads at once (the decode
// side decodes different pages concurrently). The region, the pools and the worker pool must outlive it.
#ifndef KVT_SERVER_REGION_CODEC_H_
#define KVT_SERVER_REGION_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/scheme.h"
#include "kv/page_plan.h"
#include "kv/transfer_plan.h"
#include "server/encoded_layer.h"
#include "server/host_buffer_pool.h"
#include "server/region_registry.h"
#include "server/worker_pool.h"

namespace kvt::server {

class RegionCodec {
 public:
  virtual ~RegionCodec() = default;

  // Encodes one layer's `pages` (plan order) of the request whose blocks are `block_ids` into containers that lie
  // in one pooled buffer, released when the result is destroyed. Errors name the page.
  virtual absl::StatusOr<EncodedLayer> EncodeLayer(absl::Span<const uint32_t> block_ids,
                                                   absl::Span<const kv::PlannedPage> pages, const codec::Scheme& scheme,
                                                   int chunk_tokens) = 0;

  // Whether encodes and decodes hold a GPU slot (and wait for one when all are busy): such calls run on the
  // daemon's device workers, so that codec threads never wait for a slot.
  virtual bool on_device() const = 0;
  // The memory a decode inbox should be (pinned where the GPU uploads from it).
  virtual HostMemory inbox_memory() const = 0;
  // The most pages one DecodePages call takes: 1 (the caller runs pages in parallel on its workers) or more (one
  // launch for a batch).
  virtual size_t max_decode_batch() const = 0;
  // Decodes `pages` (one layer, kind and length; at most max_decode_batch) into the region's blocks, page i from
  // containers[i] with its first `stages` streams, whose bytes must not change during the call. The containers
  // are checked as the codec checks any (header, lengths, CRCs): INVALID_ARGUMENT / DATA_LOSS name the page.
  // `urgent`: none of the pages' stages is in the blocks yet, which is what the engine waits for first; the codec
  // may let such a batch ahead of others (the GPU keeps slots for them).
  virtual absl::Status DecodePages(absl::Span<const uint32_t> block_ids, absl::Span<const kv::PageSpec> pages,
                                   absl::Span<const absl::Span<const uint8_t>> containers, int stages, bool urgent) = 0;
};

struct RegionCodecOptions {
  WorkerPool* workers = nullptr;      // the codec threads (encodes, checks)
  HostBufferPool* buffers = nullptr;  // encoded layers
  // Decodes: the heads the pages hold, [source_head_begin, source_head_begin + source_heads) of the model; the
  // heads both they and the region hold are written, the region's others left as they are. 0 heads: the
  // region's own.
  uint32_t source_head_begin = 0;
  uint32_t source_heads = 0;
};

// The codec for `region`: CUDA for GPU regions, the host codec otherwise.
std::unique_ptr<RegionCodec> MakeRegionCodec(const Region& region, const RegionCodecOptions& options);

}  // namespace kvt::server

#endif  // KVT_SERVER_REGION_CODEC_H_
