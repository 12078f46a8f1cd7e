#include "codec/internal/bitpack.h"

#include <cstring>

namespace kvt::codec::internal {

void PackField(const uint8_t* codes, size_t n, int shift, int width, uint8_t* out) {
  const uint32_t mask = (1u << width) - 1;
  if (width == 8) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(codes[i] >> shift);
    return;
  }
  if (width == 4) {
    size_t pairs = n / 2;
    for (size_t i = 0; i < pairs; ++i) {
      uint32_t lo = (codes[2 * i] >> shift) & mask;
      uint32_t hi = (codes[2 * i + 1] >> shift) & mask;
      out[i] = static_cast<uint8_t>(lo | (hi << 4));
    }
    if (n & 1) out[pairs] = static_cast<uint8_t>((codes[n - 1] >> shift) & mask);
    return;
  }
  uint64_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>((codes[i] >> shift) & mask) << bits;
    bits += width;
    if (bits >= 32) {
      uint32_t word = static_cast<uint32_t>(acc);
      std::memcpy(out + o, &word, 4);
      o += 4;
      acc >>= 32;
      bits -= 32;
    }
  }
  while (bits > 0) {
    out[o++] = static_cast<uint8_t>(acc);
    acc >>= 8;
    bits -= 8;
  }
}

void AppendField(const uint8_t* in, size_t n, int width, bool first, uint8_t* prefix) {
  const uint32_t mask = (1u << width) - 1;
  auto put = [&](size_t i, uint32_t field) {
    prefix[i] = first ? static_cast<uint8_t>(field) : static_cast<uint8_t>((prefix[i] << width) | field);
  };
  if (width == 8) {
    for (size_t i = 0; i < n; ++i) put(i, in[i]);
    return;
  }
  if (width == 4) {
    size_t pairs = n / 2;
    for (size_t i = 0; i < pairs; ++i) {
      put(2 * i, in[i] & 15);
      put(2 * i + 1, in[i] >> 4);
    }
    if (n & 1) put(n - 1, in[pairs] & 15);
    return;
  }
  const size_t bytes = PackedSize(n, width);
  uint64_t acc = 0;
  int bits = 0;
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    while (bits < width) {
      acc |= static_cast<uint64_t>(pos < bytes ? in[pos] : 0) << bits;
      ++pos;
      bits += 8;
    }
    put(i, static_cast<uint32_t>(acc) & mask);
    acc >>= width;
    bits -= width;
  }
}

}  // namespace kvt::codec::internal
