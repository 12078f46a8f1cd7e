#include "kv/float16.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::kv {
namespace {

// Reference widening, written from the formats' definitions.
double RefBf16(uint16_t b) {
  const int exp = (b >> 7) & 0xFF;
  const int mant = b & 0x7F;
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  if (exp == 0xFF) return mant ? NAN : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -133);  // mant * 2^(1 - 127 - 7)
  return sign * std::ldexp(128 + mant, exp - 134);
}

double RefFp16(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0x1F) return mant ? NAN : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// Reference narrowing: the nearest of the format's values (ties to the even code), by binary search over the
// positive finite codes 0..max_code, which are in increasing order. `beyond` is the value one code past the
// maximum would have if the exponent did not run out (2^16 for fp16, 2^128 for bf16): at or past the midpoint
// to it, IEEE rounds to inf.
uint16_t RefNarrow(float x, double (*widen)(uint16_t), uint16_t max_code, double beyond) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const uint16_t inf = max_code + 1;
  if (std::isnan(x)) return 0xFFFF;  // any NaN: compared with isnan by the callers
  const double a = std::fabs(static_cast<double>(x));
  const double top_mid = (widen(max_code) + beyond) / 2;
  if (a > top_mid || (a == top_mid && (inf & 1) == 0)) return sign | inf;
  if (a >= widen(max_code)) return sign | max_code;
  uint16_t lo = 0, hi = max_code;  // widen(lo) <= a < widen(hi)
  while (hi - lo > 1) {
    const uint16_t mid = lo + (hi - lo) / 2;
    (widen(mid) <= a ? lo : hi) = mid;
  }
  const double mid_value = (widen(lo) + widen(hi)) / 2;  // exact in double
  const uint16_t code = a < mid_value ? lo : a > mid_value ? hi : (lo & 1) ? hi : lo;
  return sign | code;
}

TEST(Float16, WideningIsExactForEveryBf16AndFp16Code) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const uint16_t code = static_cast<uint16_t>(c);
    const double bf = RefBf16(code), hf = RefFp16(code);
    if (std::isnan(bf)) {
      EXPECT_EQ(FloatBits(Bf16BitsToFloat(code)), c << 16) << std::hex << c;
    } else {
      EXPECT_EQ(static_cast<double>(Bf16BitsToFloat(code)), bf) << std::hex << c;
      EXPECT_EQ(std::signbit(Bf16BitsToFloat(code)), (c & 0x8000) != 0) << std::hex << c;
    }
    if (std::isnan(hf)) {  // made quiet, payload kept
      const uint32_t want = ((c & 0x8000u) << 16) | 0x7FC00000u | ((c & 0x3FFu) << 13);
      EXPECT_EQ(FloatBits(Fp16BitsToFloat(code)), want) << std::hex << c;
    } else {
      EXPECT_EQ(static_cast<double>(Fp16BitsToFloat(code)), hf) << std::hex << c;
      EXPECT_EQ(std::signbit(Fp16BitsToFloat(code)), (c & 0x8000) != 0) << std::hex << c;
    }
  }
}

TEST(Float16, NarrowingGivesBackEveryNonNanCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const uint16_t code = static_cast<uint16_t>(c);
    if (!std::isnan(Bf16BitsToFloat(code))) {
      EXPECT_EQ(FloatToBf16Bits(Bf16BitsToFloat(code)), code) << std::hex << c;
    }
    if (!std::isnan(Fp16BitsToFloat(code))) {
      EXPECT_EQ(FloatToFp16Bits(Fp16BitsToFloat(code)), code) << std::hex << c;
    }
  }
}

// Every rounding boundary of both formats: the midpoint between neighbours goes to the even code, a float
// just above it to the upper one, just below to the lower one.
TEST(Float16, EveryMidpointRoundsToEvenAndItsNeighboursToTheNearestCode) {
  struct Format {
    const char* name;
    float (*widen)(uint16_t);
    uint16_t (*narrow)(float);
    uint16_t max_code;
    double beyond;
  };
  for (const Format& f : {Format{"bf16", Bf16BitsToFloat, FloatToBf16Bits, 0x7F7F, std::ldexp(1.0, 128)},
                          Format{"fp16", Fp16BitsToFloat, FloatToFp16Bits, 0x7BFF, 65536.0}}) {
    for (uint32_t lo = 0; lo <= f.max_code; ++lo) {
      const double lo_value = f.widen(static_cast<uint16_t>(lo));
      const double hi_value = lo == f.max_code ? f.beyond : f.widen(static_cast<uint16_t>(lo + 1));
      const float mid = static_cast<float>((lo_value + hi_value) / 2);
      ASSERT_EQ(static_cast<double>(mid), (lo_value + hi_value) / 2) << f.name << " midpoint not a float";
      const uint16_t even = (lo & 1) ? lo + 1 : lo;
      for (const float sign : {1.0f, -1.0f}) {
        const uint16_t s = sign < 0 ? 0x8000 : 0;
        EXPECT_EQ(f.narrow(sign * mid), s | even) << f.name << " " << std::hex << lo;
        EXPECT_EQ(f.narrow(sign * std::nextafter(mid, INFINITY)), s | (lo + 1))
            << f.name << " " << std::hex << lo;
        EXPECT_EQ(f.narrow(sign * std::nextafter(mid, 0.0f)), s | lo) << f.name << " " << std::hex << lo;
      }
    }
  }
}

TEST(Float16, NanStaysNanInfStaysInfAndOverflowBecomesInf) {
  const float nan = std::nanf(""), neg_nan = -std::nanf("");
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(nan))));
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(neg_nan))));
  EXPECT_TRUE(std::isnan(Fp16BitsToFloat(FloatToFp16Bits(nan))));
  EXPECT_TRUE(std::isnan(Fp16BitsToFloat(FloatToFp16Bits(neg_nan))));
  // A NaN whose payload lies only in the bits bf16 drops must not become inf.
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(BitsToFloat(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(Fp16BitsToFloat(FloatToFp16Bits(BitsToFloat(0x7F800001u)))));
  // Payload rules (those of x86's F16C): set the quiet bit, keep the payload's top bits.
  EXPECT_EQ(FloatToFp16Bits(BitsToFloat(0x7FA00001u)), 0x7F00);
  EXPECT_EQ(FloatToFp16Bits(BitsToFloat(0xFFC12345u)), 0xFE09);
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x7FA00001u)), 0x7FE0);
  EXPECT_EQ(FloatBits(Fp16BitsToFloat(0xFDFF)), 0xFFFFE000u);
  EXPECT_EQ(FloatToBf16Bits(INFINITY), 0x7F80);
  EXPECT_EQ(FloatToBf16Bits(-INFINITY), 0xFF80);
  EXPECT_EQ(FloatToBf16Bits(FLT_MAX), 0x7F80);
  EXPECT_EQ(FloatToBf16Bits(-FLT_MAX), 0xFF80);
  EXPECT_EQ(FloatToFp16Bits(INFINITY), 0x7C00);
  EXPECT_EQ(FloatToFp16Bits(65520.0f), 0x7C00);  // the midpoint to 2^16: ties to even, which is inf
  EXPECT_EQ(FloatToFp16Bits(65519.0f), 0x7BFF);  // 65504
  EXPECT_EQ(FloatToFp16Bits(-1e6f), 0xFC00);
  EXPECT_EQ(FloatToFp16Bits(FLT_TRUE_MIN), 0x0000);
  EXPECT_EQ(FloatToFp16Bits(-FLT_TRUE_MIN), 0x8000);
  EXPECT_EQ(FloatToFp16Bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 subnormal quanta: tie, to even 2
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0:  // any bit pattern: NaNs, infs, float subnormals, huge values
        v[i] = BitsToFloat(static_cast<uint32_t>(rng()));
        break;
      case 1:  // fp16's range, subnormals included
        v[i] = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                          std::uniform_int_distribution<int>(-26, 17)(rng));
        break;
      default:  // KV-like
        v[i] = std::normal_distribution<float>(0, 3)(rng);
    }
  }
  return v;
}

TEST(Float16, NarrowingMatchesTheNearestValueReferenceOnRandomFloats) {
  const std::vector<float> v = RandomFloats(300000, 7);
  for (float x : v) {
    const uint16_t ref_bf = RefNarrow(x, RefBf16, 0x7F7F, std::ldexp(1.0, 128));
    const uint16_t ref_hf = RefNarrow(x, RefFp16, 0x7BFF, 65536.0);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(x))));
      EXPECT_TRUE(std::isnan(Fp16BitsToFloat(FloatToFp16Bits(x))));
      continue;
    }
    ASSERT_EQ(FloatToBf16Bits(x), ref_bf) << std::hexfloat << x;
    ASSERT_EQ(FloatToFp16Bits(x), ref_hf) << std::hexfloat << x;
  }
}

std::string PathName(ConvertPath path) { return path == ConvertPath::kPortable ? "portable" : "avx2+f16c"; }

// Every bulk path (vectorized) against the scalar conversions, bit for bit (NaNs included), at odd lengths
// and byte alignments. The AVX2/F16C path is checked where the CPU has it.
TEST(Float16, EveryBulkPathNarrowsLikeTheScalarFunctions) {
  const std::vector<float> v = RandomFloats(1037, 11);
  for (ConvertPath path : {ConvertPath::kPortable, ConvertPath::kAvx2F16c}) {
    if (!ConvertPathAvailable(path)) continue;
    for (size_t misalign : {0, 1, 3}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, v.size()}) {
        std::vector<uint8_t> bf(2 * n + misalign + 1, 0xEE), hf(2 * n + misalign + 1, 0xEE);
        FloatToBf16On(path, v.data(), n, bf.data() + misalign);
        FloatToFp16On(path, v.data(), n, hf.data() + misalign);
        for (size_t i = 0; i < n; ++i) {
          uint16_t got_bf, got_hf;
          std::memcpy(&got_bf, bf.data() + misalign + 2 * i, 2);
          std::memcpy(&got_hf, hf.data() + misalign + 2 * i, 2);
          ASSERT_EQ(got_bf, FloatToBf16Bits(v[i]))
              << PathName(path) << " " << i << " " << std::hexfloat << v[i];
          ASSERT_EQ(got_hf, FloatToFp16Bits(v[i]))
              << PathName(path) << " " << i << " " << std::hexfloat << v[i];
        }
        EXPECT_EQ(bf[misalign + 2 * n], 0xEE) << PathName(path) << " wrote past the end";
        EXPECT_EQ(hf[misalign + 2 * n], 0xEE) << PathName(path) << " wrote past the end";
      }
    }
  }
}

TEST(Float16, EveryBulkPathWidensEveryCodeLikeTheScalarFunctions) {
  const size_t n = 0x10000;
  for (ConvertPath path : {ConvertPath::kPortable, ConvertPath::kAvx2F16c}) {
    if (!ConvertPathAvailable(path)) continue;
    for (size_t misalign : {0, 1}) {
      std::vector<uint8_t> codes(2 * n + misalign);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t c = static_cast<uint16_t>(i);
        std::memcpy(codes.data() + misalign + 2 * i, &c, 2);
      }
      for (size_t len : {n, n - 5}) {  // a length that leaves a scalar tail
        std::vector<float> bf(len + 1, -1.0f), hf(len + 1, -1.0f);
        Bf16ToFloatOn(path, codes.data() + misalign, len, bf.data());
        Fp16ToFloatOn(path, codes.data() + misalign, len, hf.data());
        for (size_t i = 0; i < len; ++i) {
          const uint16_t c = static_cast<uint16_t>(i);
          ASSERT_EQ(FloatBits(bf[i]), FloatBits(Bf16BitsToFloat(c)))
              << PathName(path) << " " << std::hex << c;
          ASSERT_EQ(FloatBits(hf[i]), FloatBits(Fp16BitsToFloat(c)))
              << PathName(path) << " " << std::hex << c;
        }
        EXPECT_EQ(bf[len], -1.0f) << PathName(path) << " wrote past the end";
        EXPECT_EQ(hf[len], -1.0f) << PathName(path) << " wrote past the end";
      }
    }
  }
}

TEST(Float16, TheDefaultBulkFunctionsGiveTheScalarBits) {
  const std::vector<float> v = RandomFloats(100, 13);
  std::vector<uint8_t> bf(2 * v.size()), hf(2 * v.size());
  FloatToBf16(v.data(), v.size(), bf.data());
  FloatToFp16(v.data(), v.size(), hf.data());
  std::vector<float> bf_back(v.size()), hf_back(v.size());
  Bf16ToFloat(bf.data(), v.size(), bf_back.data());
  Fp16ToFloat(hf.data(), v.size(), hf_back.data());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t b, h;
    std::memcpy(&b, bf.data() + 2 * i, 2);
    std::memcpy(&h, hf.data() + 2 * i, 2);
    EXPECT_EQ(b, FloatToBf16Bits(v[i])) << i;
    EXPECT_EQ(h, FloatToFp16Bits(v[i])) << i;
    EXPECT_EQ(FloatBits(bf_back[i]), FloatBits(Bf16BitsToFloat(b))) << i;
    EXPECT_EQ(FloatBits(hf_back[i]), FloatBits(Fp16BitsToFloat(h))) << i;
  }
}

}  // namespace
}  // namespace kvt::kv
