// CRC32C (Castagnoli), as used by every kvt container stream and data-plane chunk.
// Computed by Intel ISA-L (Debian's libisal), which picks its fastest kernel for the CPU at run time
// (carry-less multiply folding with VPCLMULQDQ / PCLMULQDQ, else the crc32 instruction, else a table).
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
// A slicing-by-8 table implementation written from the polynomial alone: the independent reference the tests
// compare the library against.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);
}  // namespace internal

}  // namespace kvt

#endif  // KVT_COMMON_CRC32C_H_
