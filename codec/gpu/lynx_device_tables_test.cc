// The lynx tile encoder's bucket table (LynxDeviceTables::tile_buckets), checked on the host against the
// reference's code, with the kernel's arithmetic (codec_lynx_tile_encode.cu TileCode) done in f32 as the GPU
// does it: a = min(|xf|, 1), the round-toward-zero add of TileBucketMagic(B) = 2^23 / B, the entry at
// bits(sum) - bits(magic), and the code as the top byte of codec_kernels.h's TileBucketSum (any code width: the
// sign bit added where xf < 0) or TileBucketSum8 (8-bit codes: the sign and mantissa of xf + 0), the kernel's own
// functions. Host-only: it builds and runs without nvcc or a GPU.
#include "codec/gpu/lynx_device_tables.h"

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "codec/gpu/codec_kernels.h"
#include "codec/internal/lynx_math.h"
#include "codec/options.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu::internal {
namespace {

namespace cpu = ::kvt::codec::internal;

// The reference's b-bit code of xf (lynx_kernels_ref.cc RefCodesRange on a value clamped to [-1, 1]).
uint32_t ReferenceCode(const cpu::LynxTables& t, float xf) {
  const float c = xf > -1.0f ? (xf < 1.0f ? xf : 1.0f) : -1.0f;
  const uint32_t neg = c < 0.0f ? 1u : 0u;
  return neg << (t.bits - 1) | static_cast<uint32_t>(cpu::MagnitudeCode(t, std::fabs(c)));
}

// a + b in f32 under `mode` (FE_TOWARDZERO for the kernel's __fadd_rz); volatile keeps the add between the
// mode switches.
float Add(float a, float b, int mode) {
  const int previous = std::fegetround();
  std::fesetround(mode);
  volatile float x = a, y = b;
  volatile float s = x + y;
  std::fesetround(previous);
  return s;
}

// TileCode's bucket path for xf; the entry index goes to *j (the kernel reads entry j unchecked). `mode` is
// the bucket add's rounding: only FE_TOWARDZERO is the kernel's (the mutation test tries another). sign8: the
// 8-bit codes' form.
uint32_t TileCode(const LynxDeviceTables& d, float xf, int64_t* j, int mode = FE_TOWARDZERO, bool sign8 = false) {
  const float magic = TileBucketMagic(d.bucket_count);
  const float a = std::fmin(std::fabs(xf), 1.0f);  // min.f32: a NaN operand gives the other
  const float sum = Add(a, magic, mode);
  *j = static_cast<int64_t>(absl::bit_cast<uint32_t>(sum)) - absl::bit_cast<uint32_t>(magic);
  if (*j < 0 || *j > d.bucket_count) return ~0u;
  if (sign8) return TileBucketSum8(d.tile_buckets[*j], absl::bit_cast<uint32_t>(Add(xf, 0.0f, FE_TONEAREST))) >> 24;
  const uint32_t sign = xf < 0.0f ? 1u << (d.bits - 1 + 24) : 0u;  // set.lt: -0 is not below 0
  return TileBucketSum(d.tile_buckets[*j], absl::bit_cast<uint32_t>(a), sign) >> 24;
}

struct Curve {
  float alpha, top_width;
  int bits;
};

// The curves of a grid (alpha 0.001..1000, top width 0 or 0.02..0.12, 2..8 bits) whose tables take the tile
// encoder's bucket path (one correction, at most kMaxTileBuckets buckets): 57 of them, 16 to 1024 buckets.
std::vector<Curve> TileCurves() {
  std::vector<Curve> out;
  for (float alpha : {0.001f, 0.1f, 0.5f, 1.0f, 4.0f, 30.0f, 1000.0f}) {
    for (float top_width : {0.0f, 0.02f, 0.11f, 0.12f}) {
      for (int bits = 2; bits <= 8; ++bits) {
        if (top_width > 0.0f && bits != 8) continue;  // the knee is an 8-bit curve's
        LynxDeviceTables d;
        FillLynxTables(*cpu::GetLynxTables(alpha, top_width, bits), d);
        if (TakesTileBuckets(d.bucket_count)) out.push_back({alpha, top_width, bits});
      }
    }
  }
  return out;
}

std::string Name(const Curve& c) {
  return absl::StrCat("alpha ", c.alpha, ", top width ", c.top_width, ", ", c.bits, " bits");
}

// x and its float neighbours, both signs.
void AddAround(float x, std::vector<float>& out) {
  for (float s : {x, -x}) {
    out.push_back(s);
    out.push_back(std::nextafter(s, std::numeric_limits<float>::infinity()));
    out.push_back(std::nextafter(s, -std::numeric_limits<float>::infinity()));
  }
}

// Every bucket edge, every threshold, both zeros, subnormals and a few others, with their neighbours.
std::vector<float> Edges(const cpu::LynxTables& t, int buckets) {
  std::vector<float> values;
  for (int m = 0; m <= buckets; ++m) AddAround(static_cast<float>(m) / static_cast<float>(buckets), values);
  for (int k = 1; k <= t.max_code; ++k) AddAround(t.thresholds[k], values);
  // Past 1 (clamped, with mantissas of their own), too.
  for (float x : {0.0f, 1.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  1e-30f, 0.5f, 1.5f, 1.75f, 3e38f, std::numeric_limits<float>::infinity()}) {
    AddAround(x, values);
  }
  return values;
}

// How many of `values` TileCode codes unlike the reference; the first goes to *first.
int Mismatches(const cpu::LynxTables& t, const LynxDeviceTables& d, const std::vector<float>& values,
               std::string* first, int mode = FE_TOWARDZERO, bool sign8 = false) {
  int bad = 0;
  for (float xf : values) {
    int64_t j = 0;
    const uint32_t got = TileCode(d, xf, &j, mode, sign8);
    const uint32_t want = ReferenceCode(t, xf);
    if (got != want && bad++ == 0) {
      *first = absl::StrCat("xf ", xf, " (bits 0x", absl::Hex(absl::bit_cast<uint32_t>(xf)), ") entry ", j,
                            " code ", got, ", reference ", want);
    }
  }
  return bad;
}

TEST(LynxDeviceTablesTest, TheDefaultCurveTakesTheTileBucketPath) {
  const CodecOptions defaults;
  const auto t = cpu::GetLynxTables(defaults.alpha, defaults.top_width, 8);
  LynxDeviceTables d;
  FillLynxTables(*t, d);
  EXPECT_GT(d.bucket_count, 0);
  EXPECT_LE(d.bucket_count, kMaxTileBuckets);
  EXPECT_EQ(d.corrections, 1);
  EXPECT_TRUE(TakesTileBuckets(d.bucket_count));
}

TEST(LynxDeviceTablesTest, BucketCodesMatchTheReferenceAtEveryEdge) {
  const std::vector<Curve> curves = TileCurves();
  ASSERT_GE(curves.size(), 10u);
  for (const Curve& curve : curves) {
    const auto t = cpu::GetLynxTables(curve.alpha, curve.top_width, curve.bits);
    LynxDeviceTables d;
    FillLynxTables(*t, d);
    for (bool sign8 : {false, true}) {
      if (sign8 && curve.bits != 8) continue;
      std::string first;
      EXPECT_EQ(Mismatches(*t, d, Edges(*t, d.bucket_count), &first, FE_TOWARDZERO, sign8), 0)
          << Name(curve) << (sign8 ? ", 8-bit form" : "") << ": " << first;
    }
  }
}

TEST(LynxDeviceTablesTest, BucketCodesMatchTheReferenceOverASweepOfTheFloatsInMinusTwoToTwo) {
  const std::vector<Curve> curves = TileCurves();
  ASSERT_GE(curves.size(), 10u);
  // Every 4099th bit pattern of each sign up to 2.0f (about 260 000 a sign), per curve: past 1 too, where a is
  // clamped and the 8-bit form still reads xf's own mantissa.
  std::vector<float> values;
  for (uint32_t u = 0; u <= 0x40000000u; u += 4099) {
    values.push_back(absl::bit_cast<float>(u));
    values.push_back(absl::bit_cast<float>(u | 0x80000000u));
  }
  for (const Curve& curve : curves) {
    const auto t = cpu::GetLynxTables(curve.alpha, curve.top_width, curve.bits);
    LynxDeviceTables d;
    FillLynxTables(*t, d);
    for (bool sign8 : {false, true}) {
      if (sign8 && curve.bits != 8) continue;
      std::string first;
      EXPECT_EQ(Mismatches(*t, d, values, &first, FE_TOWARDZERO, sign8), 0)
          << Name(curve) << (sign8 ? ", 8-bit form" : "") << ": " << first;
    }
  }
}

TEST(LynxDeviceTablesTest, EveryIndexTheKernelCanFormIsInsideTheTable) {
  const auto t = cpu::GetLynxTables(0.1f, 0.11f, 8);
  LynxDeviceTables d;
  FillLynxTables(*t, d);
  // NaN (min.f32 makes |NaN| 1), infinities, both zeros, the ends and past them.
  const float inf = std::numeric_limits<float>::infinity();
  for (float xf : {std::numeric_limits<float>::quiet_NaN(), inf, -inf, -0.0f, 0.0f, -1.0f, 1.0f, 3e38f,
                   -3e38f, std::nextafter(1.0f, 2.0f)}) {
    int64_t j = -1;
    TileCode(d, xf, &j);
    EXPECT_GE(j, 0) << xf;
    EXPECT_LE(j, d.bucket_count) << xf;
  }
  // -0, as the reference's positive zero, codes 0; the ends code M with their signs; in both forms.
  for (bool sign8 : {false, true}) {
    int64_t j = 0;
    EXPECT_EQ(TileCode(d, -0.0f, &j, FE_TOWARDZERO, sign8), 0u);
    EXPECT_EQ(TileCode(d, -1.0f, &j, FE_TOWARDZERO, sign8), 0x80u | static_cast<uint32_t>(t->max_code));
    EXPECT_EQ(TileCode(d, 1.0f, &j, FE_TOWARDZERO, sign8), static_cast<uint32_t>(t->max_code));
    EXPECT_EQ(TileCode(d, 2.0f, &j, FE_TOWARDZERO, sign8), static_cast<uint32_t>(t->max_code));
    EXPECT_EQ(TileCode(d, -1.5f, &j, FE_TOWARDZERO, sign8), 0x80u | static_cast<uint32_t>(t->max_code));
  }
  // Without the add of +0 the 8-bit form would code -0 as a negative zero.
  EXPECT_EQ(TileBucketSum8(d.tile_buckets[0], absl::bit_cast<uint32_t>(-0.0f)) >> 24, 0x80u);
}

// The edge check catches a kernel that rounded the bucket add to nearest, and a table whose thresholds sit
// one entry off: the tests above can fail.
TEST(LynxDeviceTablesTest, ARoundToNearestAddAndThresholdsOneEntryOffAreCaught) {
  const auto t = cpu::GetLynxTables(0.1f, 0.11f, 8);
  LynxDeviceTables d;
  FillLynxTables(*t, d);
  const std::vector<float> edges = Edges(*t, d.bucket_count);
  std::string first;
  ASSERT_EQ(Mismatches(*t, d, edges, &first), 0) << first;
  EXPECT_GT(Mismatches(*t, d, edges, &first, FE_TONEAREST), 0);
  for (int j = 0; j < d.bucket_count; ++j) {
    d.tile_buckets[j] = (d.tile_buckets[j] & 0xFF000000u) | (d.tile_buckets[j + 1] & 0x00FFFFFFu);
  }
  EXPECT_GT(Mismatches(*t, d, edges, &first), t->max_code / 2);
}

// The entries' structure on every curve: the top byte is the bucket's base, bucket 0 and the last entry (a == 1)
// hold no threshold, and a threshold left inside bucket j is the reference's next one, in the bucket's binade.
// And a kernel that took the entry's top byte alone (no carry) is caught.
TEST(LynxDeviceTablesTest, EntriesHoldTheBaseAndTheNextThresholdsMantissaInsideItsBucket) {
  for (const Curve& curve : TileCurves()) {
    const auto t = cpu::GetLynxTables(curve.alpha, curve.top_width, curve.bits);
    LynxDeviceTables d;
    FillLynxTables(*t, d);
    const int count = d.bucket_count;
    EXPECT_EQ(d.tile_buckets[0] & 0x00FFFFFFu, 1u << 23) << Name(curve);
    EXPECT_EQ(d.tile_buckets[count], static_cast<uint32_t>(t->max_code) << 24 | 1u << 23) << Name(curve);
    int inside = 0;
    for (int j = 0; j <= count; ++j) {
      const uint32_t entry = d.tile_buckets[j];
      ASSERT_EQ(entry >> 24, static_cast<uint32_t>(t->bucket_base[j])) << Name(curve) << " entry " << j;
      if ((entry & 0x00FFFFFFu) == 1u << 23) continue;  // no threshold inside
      ++inside;
      const float thr = t->thresholds[t->bucket_base[j] + 1];
      EXPECT_GT(thr, static_cast<float>(j) / static_cast<float>(count)) << Name(curve) << " entry " << j;
      EXPECT_LT(thr, static_cast<float>(j + 1) / static_cast<float>(count)) << Name(curve) << " entry " << j;
      EXPECT_EQ((entry & 0x00FFFFFFu) + (absl::bit_cast<uint32_t>(thr) & 0x007FFFFFu), 1u << 24)
          << Name(curve) << " entry " << j;
    }
    int off_edges = 0;  // thresholds not on a bucket edge: each is inside one bucket
    for (int k = 1; k <= t->max_code; ++k) {
      const float scaled = t->thresholds[k] * static_cast<float>(count);  // exact: count is a power of two
      off_edges += scaled != std::floor(scaled) ? 1 : 0;
    }
    EXPECT_EQ(inside, off_edges) << Name(curve);
  }
  // A kernel that took the top byte alone (no carry) would code every threshold inside a bucket one low: on
  // the default curve that is all of them.
  const auto t = cpu::GetLynxTables(0.1f, 0.11f, 8);
  LynxDeviceTables d;
  FillLynxTables(*t, d);
  int low = 0;
  for (int k = 1; k <= t->max_code; ++k) {
    const float a = t->thresholds[k];
    const int64_t j = static_cast<int64_t>(a * static_cast<float>(d.bucket_count));
    low += (d.tile_buckets[j] >> 24) < TileBucketSum(d.tile_buckets[j], absl::bit_cast<uint32_t>(a), 0) >> 24;
  }
  EXPECT_EQ(low, t->max_code);
}

}  // namespace
}  // namespace kvt::codec::gpu::internal
