#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>
#include <cstring>

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

}  // namespace internal

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  // ISA-L's crc32_iscsi works on the raw register (no inversion in or out) and takes an int length, so larger
  // buffers go through in pieces; the register carries across them.
  constexpr size_t kMaxPiece = size_t{1} << 30;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L's signature lacks const; it only reads.
  uint32_t r = ~crc;
  while (n > 0) {
    const size_t piece = std::min(n, kMaxPiece);
    r = crc32_iscsi(p, static_cast<int>(piece), r);
    p += piece;
    n -= piece;
  }
  return ~r;
}

}  // namespace kvt
