#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace kvt {
namespace internal {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, reflected.

std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (int s = 1; s < 8; ++s) {
    for (uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
  return t;
}

const std::array<std::array<uint32_t, 256>, 8>& Tables() {
  static const auto tables = MakeTables();
  return tables;
}

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n) {
  const auto& t = Tables();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {  // slicing-by-8
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

namespace {

// Raw register update (no pre/post inversion) over `n` zero bytes, for the interleaved hardware path:
// the CRC register is linear, so R(r, A || B) = Shift(R(r, A), |B|) ^ R(0, B), where Shift feeds |B| zeros.
// ZeroShift holds that linear map for one fixed length as four byte-indexed tables.
class ZeroShift {
 public:
  explicit ZeroShift(size_t length) {
    // Images of the 32 basis vectors, each by feeding `length` zero bytes through the portable tables.
    const auto& t = Tables()[0];
    std::array<uint32_t, 32> basis{};
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t c = 1u << bit;
      for (size_t i = 0; i < length; ++i) c = (c >> 8) ^ t[c & 0xFF];
      basis[bit] = c;
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) v ^= basis[8 * k + j];
        }
        table_[k][b] = v;
      }
    }
  }
  uint32_t operator()(uint32_t r) const {
    return table_[0][r & 0xFF] ^ table_[1][(r >> 8) & 0xFF] ^ table_[2][(r >> 16) & 0xFF] ^ table_[3][r >> 24];
  }

 private:
  std::array<std::array<uint32_t, 256>, 4> table_{};
};

}  // namespace

#if defined(__x86_64__)
namespace {

// Bytes per lane of the three-way interleaved loop. The crc32 instruction has a latency of 3 cycles and a
// throughput of 1 per cycle, so three independent lanes keep it busy; the lanes are joined with ZeroShift.
constexpr size_t kLaneBytes = 4096;

__attribute__((target("sse4.2"))) inline uint64_t Crc64Words(uint64_t c, const uint8_t* p, size_t words) {
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    c = _mm_crc32_u64(c, w);
  }
  return c;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t n) {
  static const ZeroShift* const shift = new ZeroShift(kLaneBytes);
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  while (n >= 3 * kLaneBytes) {
    uint64_t a = c, b = 0, d = 0;
    const uint8_t* pa = p;
    const uint8_t* pb = p + kLaneBytes;
    const uint8_t* pd = p + 2 * kLaneBytes;
    for (size_t i = 0; i < kLaneBytes; i += 8) {
      uint64_t wa, wb, wd;
      std::memcpy(&wa, pa + i, 8);
      std::memcpy(&wb, pb + i, 8);
      std::memcpy(&wd, pd + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      d = _mm_crc32_u64(d, wd);
    }
    uint32_t joined = (*shift)(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    c = (*shift)(joined) ^ static_cast<uint32_t>(d);
    p += 3 * kLaneBytes;
    n -= 3 * kLaneBytes;
  }
  c = Crc64Words(c, p, n / 8);
  p += n & ~size_t{7};
  n &= 7;
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool Crc32cHardwareAvailable() { return __builtin_cpu_supports("sse4.2"); }
#else
uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t n) { return Crc32cPortable(crc, data, n); }
bool Crc32cHardwareAvailable() { return false; }
#endif

}  // namespace internal

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const bool hardware = internal::Crc32cHardwareAvailable();
  return hardware ? internal::Crc32cHardware(crc, data, n) : internal::Crc32cPortable(crc, data, n);
}

}  // namespace kvt
