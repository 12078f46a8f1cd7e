// KVT_HOST_DEVICE: a function compiled for host and device under nvcc, and plain inline C++ otherwise, for the few
// headers whose code the kernels run and host tests check as it is (fast_divisor.h, proven_ends.h, codec_kernels.h's
// TileBucketSum).
#ifndef KVT_CODEC_GPU_HOST_DEVICE_H_
#define KVT_CODEC_GPU_HOST_DEVICE_H_

#ifdef __CUDACC__
#define KVT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVT_HOST_DEVICE inline
#endif

#endif  // KVT_CODEC_GPU_HOST_DEVICE_H_
