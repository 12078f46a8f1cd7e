// Division by a divisor fixed at launch: the launcher computes FastDivisor::For(d) on the host, and the kernels
// divide with one multiply-high, a shift and a select instead of the ~20 instructions of a 32-bit integer
// division by a runtime value (which the tile decoders paid five times per thread for their tile and chunk
// indices). Plain C++ as well as CUDA, so that fast_divisor_test.cc checks this very code on the host.
#ifndef KVT_CODEC_GPU_FAST_DIVISOR_H_
#define KVT_CODEC_GPU_FAST_DIVISOR_H_

#include <cassert>
#include <cstdint>

#include "numerics/host_device.h"

namespace kvt::codec::gpu::internal {

// x / d for 0 <= x < 2^31 and d >= 1 (the round-up method): with l = ceil(log2 d) and m = ceil(2^(31 + l) / d),
// x / d = floor(x m / 2^(31 + l)). Writing m d = 2^(31 + l) + e with 0 <= e < d and x = q d + r, the quotient is
// q + (r + x e / 2^(31 + l)) / d, and x e < 2^31 2^l keeps the second term below one. d = 1 (m would not fit in
// 32 bits) takes x itself.
struct FastDivisor {
  uint32_t mul = 0;
  uint32_t shift = 0;  // l - 1
  uint32_t is_one = 1;  // d == 1

  static FastDivisor For(int d) {  // host
    assert(d >= 1);
    FastDivisor f;
    if (d <= 1) return f;
    uint32_t l = 0;
    while ((1ull << l) < static_cast<uint64_t>(d)) ++l;
    f.mul = static_cast<uint32_t>(((1ull << (31 + l)) + static_cast<uint64_t>(d) - 1) / static_cast<uint64_t>(d));
    f.shift = l - 1;
    f.is_one = 0;
    return f;
  }

  KVT_HOST_DEVICE int Divide(int x) const {
    const uint32_t u = static_cast<uint32_t>(x);
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(u, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(u) * mul) >> 32);
#endif
    return static_cast<int>(is_one ? u : hi >> shift);
  }
};

}  // namespace kvt::codec::gpu::internal

#endif  // KVT_CODEC_GPU_FAST_DIVISOR_H_
