// The RegionCodec of shared-memory regions: pages gathered from the engine's blocks into floats and encoded by
// the CPU codec on the worker pool, each straight into its place in one pooled pageable buffer; decoded one page
// a call (the decode side runs pages in parallel) and scattered into the engine's blocks, writing the heads the
// region and the source share (kv::ScatterPage). Thread-safe.
#ifndef KVT_SERVER_HOST_REGION_CODEC_H_
#define KVT_SERVER_HOST_REGION_CODEC_H_

#include <memory>

#include "server/region_codec.h"

namespace kvt::server {

std::unique_ptr<RegionCodec> MakeHostRegionCodec(const Region& region, const RegionCodecOptions& options);

}  // namespace kvt::server

#endif  // KVT_SERVER_HOST_REGION_CODEC_H_
