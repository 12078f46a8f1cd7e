// Bit packing of per-value codes into a stream and back. Value i's field occupies stream bits
// [i * width, (i + 1) * width), bit j of the stream being bit (j % 8) of byte j / 8 (LSB first); the last byte
// is zero-padded. Pure functions; thread-safe.
#ifndef KVT_CODEC_INTERNAL_BITPACK_H_
#define KVT_CODEC_INTERNAL_BITPACK_H_

#include <cstddef>
#include <cstdint>

namespace kvt::codec::internal {

inline size_t PackedSize(size_t n, int width) { return (n * static_cast<size_t>(width) + 7) / 8; }
// Field i of a stream of 4-bit fields.
inline int NibbleAt(const uint8_t* stream, size_t i) { return (stream[i / 2] >> (4 * (i % 2))) & 0xF; }

// Writes field (codes[i] >> shift) & ((1 << width) - 1) of each of n codes into out[0, PackedSize(n, width)).
// width 1..8 (16 is not a code width here).
void PackField(const uint8_t* codes, size_t n, int shift, int width, uint8_t* out);

// prefix[i] = (prefix[i] << width) | field i of `in` (PackedSize(n, width) bytes): appends one stream's bits to
// the code prefixes. With `first`, prefix[i] = field i.
void AppendField(const uint8_t* in, size_t n, int width, bool first, uint8_t* prefix);

// The implementations behind PackField / AppendField (chosen once by CPU): portable, and BMI2 (pext/pdep
// on 8 values at a time). Exposed so tests can compare them; the BMI2 ones require the CPU to have BMI2.
void PackFieldPortable(const uint8_t* codes, size_t n, int shift, int width, uint8_t* out);
void AppendFieldPortable(const uint8_t* in, size_t n, int width, bool first, uint8_t* prefix);
void PackFieldBmi2(const uint8_t* codes, size_t n, int shift, int width, uint8_t* out);
void AppendFieldBmi2(const uint8_t* in, size_t n, int width, bool first, uint8_t* prefix);
bool Bmi2Available();
// 4-bit fields with AVX-512BW (requires Avx512BwAvailable()); PackField / AppendField use them for width 4.
void PackNibblesAvx512(const uint8_t* codes, size_t n, int shift, uint8_t* out);
void AppendNibblesAvx512(const uint8_t* in, size_t n, bool first, uint8_t* prefix);
bool Avx512BwAvailable();

}  // namespace kvt::codec::internal

#endif  // KVT_CODEC_INTERNAL_BITPACK_H_
