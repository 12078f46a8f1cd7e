// CRC32C (Castagnoli), as used by every kvt container stream and data-plane chunk.
// Uses the SSE4.2 crc32 instruction when the CPU has it, else a table; both give identical results.
// Thread-safe, no state.
#ifndef KVT_COMMON_CRC32C_H_
#define KVT_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kvt {

// Returns the CRC32C of data[0, n) continuing from `crc` (0 for a fresh checksum):
// Crc32c(ab) == Crc32cExtend(Crc32c(a), b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

namespace internal {
// The portable table path and the hardware path, exposed so tests can compare them.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);
// Requires the CPU to support SSE4.2 (check Crc32cHardwareAvailable()).
uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t n);
bool Crc32cHardwareAvailable();
}  // namespace internal

}  // namespace kvt

#endif  // KVT_COMMON_CRC32C_H_
