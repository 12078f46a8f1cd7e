// KVT_HOST_DEVICE: a function compiled for host and device under nvcc, and plain inline C++ otherwise, for the
// headers whose code both the CPU paths and the kernels run as it is (numerics/*.h, codec/gpu/fast_divisor.h,
// proven_ends.h, codec_kernels.h's TileBucketSum), so one definition is the spec and the host tests check the
// kernels' arithmetic.
#ifndef KVT_NUMERICS_HOST_DEVICE_H_
#define KVT_NUMERICS_HOST_DEVICE_H_

#ifdef __CUDACC__
#define KVT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVT_HOST_DEVICE inline
#endif

#endif  // KVT_NUMERICS_HOST_DEVICE_H_
