#include "server/region_codec.h"

#include "server/gpu_region_codec.h"
#include "server/host_region_codec.h"

namespace kvt::server {

std::unique_ptr<RegionCodec> MakeRegionCodec(const Region& region, const RegionCodecOptions& options) {
  return region.on_gpu() ? MakeGpuRegionCodec(region, options) : MakeHostRegionCodec(region, options);
}

}  // namespace kvt::server
