// The bits of an f32 and back, on the host (memcpy) and the device (intrinsics).
#ifndef KVT_NUMERICS_BITS_H_
#define KVT_NUMERICS_BITS_H_

#include <cstdint>
#include <cstring>

#include "numerics/host_device.h"

namespace kvt::numerics {

KVT_HOST_DEVICE uint32_t FloatBits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}

KVT_HOST_DEVICE float BitsToFloat(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

// Round to nearest, ties to even: the host's default rounding mode (nearbyint), rintf on the device.
KVT_HOST_DEVICE float RoundHalfEven(float x) {
#ifdef __CUDA_ARCH__
  return rintf(x);
#else
  return __builtin_nearbyintf(x);
#endif
}

}  // namespace kvt::numerics

#endif  // KVT_NUMERICS_BITS_H_
