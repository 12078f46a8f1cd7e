#include "codec/gpu/lynx_device_tables.h"

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/base/casts.h"
#include "codec/options.h"

namespace kvt::codec::gpu::internal {

void FillLynxTables(const ::kvt::codec::internal::LynxTables& t, LynxDeviceTables& d) {
  std::memset(&d, 0, sizeof(d));  // padding and unused entries too: the bytes uploaded are the tables' alone
  for (int k = 0; k < 128 + kMaxDeviceCorrections; ++k) {
    d.thresholds[k] = k <= t.max_code ? t.thresholds[k] : INFINITY;
  }
  d.bucket_count = 0;
  d.corrections = 0;
  if (t.bucket_count <= kMaxDeviceBuckets && t.corrections == 1) {
    d.bucket_count = t.bucket_count;
    d.corrections = t.corrections;
    for (int j = 0; j <= t.bucket_count; ++j) d.bucket_base[j] = static_cast<uint8_t>(t.bucket_base[j]);
    if (TakesTileBuckets(d.bucket_count)) {
      // codec_kernels.h TileBucketSum's entries. The one threshold a bucket j may hold lies in (j / B, (j + 1) / B):
      // thresholds at or below j / B are counted in its base. For j >= 1 that interval is inside one binade, so
      // the threshold compares with a's by mantissa alone, and its mantissa bits are nonzero (it is above j / B,
      // at or above the binade's start), so 2^24 less them stays in the low 24 bits. Bucket 0 holds none: B <=
      // kMaxTileBuckets is below LynxTables' cap, so 1 / B <= the smallest gap between thresholds <= thresholds[1].
      const float count = static_cast<float>(t.bucket_count);
      for (int j = 0; j <= t.bucket_count; ++j) {
        const int base = t.bucket_base[j];
        const float thr = d.thresholds[base + 1];
        const bool inside = thr < static_cast<float>(j + 1) / count;  // exact: B is a power of two
        assert(!inside || (j >= 1 && std::ilogb(thr) == std::ilogb(static_cast<float>(j) / count)));
        const uint32_t mantissa = absl::bit_cast<uint32_t>(thr) & 0x007FFFFFu;
        assert(!inside || mantissa != 0);
        d.tile_buckets[j] = static_cast<uint32_t>(base) << 24 | (inside ? (1u << 24) - mantissa : 1u << 23);
      }
    }
  }
  for (int i = 0; i <= t.max_code; ++i) d.full_values[i] = t.full_values[i];
  for (int i = 0; i < 256; ++i) d.decode[i] = 0.0f;
  d.alpha = t.guess_alpha;  // the log guess's bulk (the knee's top is left to the corrections)
  d.inv_log1p_alpha = static_cast<float>(1.0 / std::log1p(static_cast<double>(t.alpha)));
  d.bits = t.bits;
  d.max_code = t.max_code;
}

void FillAnchorFallback(const ::kvt::codec::internal::LynxTables& t, const Scheme& scheme,
                        LynxDeviceTables& d) {
  int known = 0, j = 0;
  for (int s = 0; s + 1 < scheme.num_streams(); ++s) {
    known += scheme.stage_bits[s];
    const std::vector<float>& centre = t.decode_table(known, AnchorRule::kCodeCentre);
    for (int h = 0; h < (1 << (known - 1)) && j < 128; ++h) d.anchor_fallback[j++] = centre[h];
  }
}

}  // namespace kvt::codec::gpu::internal
