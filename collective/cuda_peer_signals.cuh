// Device side of the signals between the ranks of the CUDA backend (cuda_peer_signals.h): system-scope
// release/acquire on 64-bit flags in peer memory, the grid-wide "last block signals" arrival, and a bounded
// wait for every rank's signal. Shared by the AllReduce and the MoE kernels; include it in one .cu file each.
#ifndef KVT_COLLECTIVE_CUDA_PEER_SIGNALS_CUH_
#define KVT_COLLECTIVE_CUDA_PEER_SIGNALS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collective/cuda_peer_signals.h"

namespace kvt::collective::internal {

__device__ __forceinline__ uint64_t LoadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void StoreReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Ordered only by a later release store of the same thread (a signal's count and tag before its flag).
__device__ __forceinline__ void StoreRelaxedSys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One kind of signal: where it lives in every rank's flag area (`value_word`: world u64 values, one per
// sender; `tag_word`: the senders' call tags), and the call it belongs to.
struct SignalSpec {
  uint64_t* const* flags;  // [world]: every rank's flag area as mapped here
  int world, rank;
  uint32_t value_word, tag_word;
  uint64_t epoch, call_tag, timeout_ns;
  DeviceStatus* status;  // this rank's
  // When not null: counts[r] is stored into rank r's word `count_word + rank` before the signal (how many rows
  // this rank sent it).
  const int32_t* counts = nullptr;
  uint32_t count_word = 0;
};

// Called by every block of the grid when its work is done: the last block to arrive signals every rank with
// this call's epoch and the error bits seen so far, after every block's stores (peer memory included).
//
// One thread per rank stores that rank's words (count, tag, then the flag with release), so the signals' trips
// over the links overlap. A release store waits for the thread's earlier stores to be performed: from one
// thread, a world of 8 cost 16 such waits in a row (24 with the counts), each a round trip to a peer.
__device__ inline void ArriveAndSignal(const SignalSpec& s) {
  __shared__ int last;
  __shared__ uint64_t value;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();  // this block's stores, peer memory included, before the arrival
    const unsigned prev = atomicAdd(&s.status->arrivals, 1u);
    last = prev == gridDim.x - 1 ? 1 : 0;
    if (last) {
      s.status->arrivals = 0;
      __threadfence_system();  // every block's stores (seen through their arrivals) before the signals below
      const unsigned errors = atomicOr(&s.status->errors, 0u);
      uint64_t v = s.epoch * 4;
      if (errors & kBadDataErrors) v |= kSignalBadData;
      if (errors & (kTimedOut | kPeerTimedOut)) v |= kSignalTimedOut;
      value = v;
    }
  }
  __syncthreads();  // orders thread 0's fence before the other threads' release stores
  if (!last) return;
  for (int r = threadIdx.x; r < s.world; r += blockDim.x) {
    if (s.counts != nullptr) {
      const uint32_t count = static_cast<uint32_t>(__ldcg(s.counts + r));
      StoreRelaxedSys(s.flags[r] + s.count_word + s.rank, static_cast<uint64_t>(count));
    }
    StoreRelaxedSys(s.flags[r] + s.tag_word + s.rank, s.call_tag);
    StoreReleaseSys(s.flags[r] + s.value_word + s.rank, value);  // after the count and the tag
  }
}

// Every block waits until all ranks signalled this call. False (in every thread) when one timed out or
// signalled an error; the block then skips its work. An error bit does not cut the wait short: every rank's
// signal of this call must be seen, or a rank could run ahead into the next call and overwrite a tag that a
// slower peer has yet to check. Only a timeout (after which the group is out of step) stops early: a rank that
// signals it timed out ends the wait for the ranks above it, and a wait past the deadline ends the call's waits.
//
// One thread per rank polls, so the block sees the last signal one load after it lands instead of after a walk
// over the ranks; thread 0 then judges the ranks in rank order. The outcome is that of the walk: ranks below the
// lowest one that signalled a timeout are waited for in full (a missing one is named as timed out), ranks above
// it are not judged.
__device__ inline bool WaitForPeers(const SignalSpec& s) {
  enum : uint8_t { kArrived, kLate, kAbandoned };
  __shared__ uint64_t seen[kMaxCudaWorld];
  __shared__ uint8_t state[kMaxCudaWorld];
  __shared__ int stop;  // the lowest rank that signalled it timed out (s.world if none)
  __shared__ int ok;
  if (threadIdx.x == 0) stop = s.world;
  __syncthreads();
  const uint64_t* flags = s.flags[s.rank] + s.value_word;
  const uint64_t want = s.epoch * 4;
  const uint64_t start = GlobalTimerNs();  // one deadline for the call, however many ranks a thread polls
  for (int r = threadIdx.x; r < s.world; r += blockDim.x) {
    uint64_t v;
    uint8_t st = kArrived;
    while ((v = LoadAcquireSys(flags + r)) < want) {
      if (*static_cast<volatile int*>(&stop) < r) {
        st = kAbandoned;
        break;
      }
      if (GlobalTimerNs() - start > s.timeout_ns) {
        st = kLate;
        break;
      }
      __nanosleep(64);
    }
    if (st == kArrived && (v & kSignalTimedOut)) atomicMin(&stop, r);
    seen[r] = v;
    state[r] = st;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    bool good = true;
    for (int r = 0; r < s.world; ++r) {
      if (state[r] == kAbandoned) break;  // a lower rank's timed-out signal ended it: that rank was judged
      if (state[r] == kLate) {
        atomicOr(&s.status->errors, static_cast<unsigned>(kTimedOut));
        atomicMin(&s.status->peer, r);
        good = false;
        break;
      }
      const uint64_t v = seen[r];
      if (LoadAcquireSys(s.flags[s.rank] + s.tag_word + r) != s.call_tag) {
        atomicOr(&s.status->errors, static_cast<unsigned>(kMismatch));
        atomicMin(&s.status->peer, r);
        good = false;
      }
      if (v & (kSignalBadData | kSignalTimedOut)) {
        atomicOr(&s.status->errors, static_cast<unsigned>((v & kSignalBadData ? kPeerBadData : 0) |
                                                          (v & kSignalTimedOut ? kPeerTimedOut : 0)));
        atomicMin(&s.status->reporter, r);
        good = false;
        if (v & kSignalTimedOut) break;  // the group is out of step already: waiting on is pointless
      }
    }
    ok = good ? 1 : 0;
  }
  __syncthreads();
  return ok != 0;
}

// `e` as INTERNAL, naming `what`; OK for cudaSuccess.
inline absl::Status CudaLaunchStatus(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// The last launch's error as INTERNAL, naming `what`; OK when the launch went through.
inline absl::Status LaunchError(const char* what) { return CudaLaunchStatus(what, cudaGetLastError()); }

// Lets the next kernel of the stream start its blocks once every block of this grid has started (Hopper's
// programmatic dependent launch; a no-op when the next kernel was launched plainly). Call it first thing in a
// kernel whose successor waits on the peers' signals rather than on stream order.
__device__ __forceinline__ void LaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the stream's previous kernel has finished and its writes are visible (Hopper's programmatic
// dependent launch; a no-op when this kernel was launched plainly, as stream order already gave that). The first
// thing a kernel launched early does when it must order what it reads or overwrites by the stream, not by the
// peers' signals.
__device__ __forceinline__ void WaitForPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches `kernel` on `blocks` x `threads` with at most one launch attribute (none when `attribute` is null).
// Launch errors as INTERNAL, naming `what`.
template <typename... Params, typename... Args>
absl::Status LaunchKernelWith(void (*kernel)(Params...), int blocks, int threads, cudaStream_t stream,
                              const cudaLaunchAttribute* attribute, const char* what, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.stream = stream;
  cudaLaunchAttribute copy = {};
  if (attribute != nullptr) {
    copy = *attribute;
    config.attrs = &copy;
    config.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, args...);
  if (e == cudaSuccess) return LaunchError(what);
  cudaGetLastError();  // clear it: the error is returned here
  return CudaLaunchStatus(what, e);
}

// Launches `kernel` on `blocks` x `threads`. With `early`, as a programmatic dependent of the stream's previous
// kernel: its blocks may start while that kernel's last blocks still run, so it must order what it reads by the
// signals, or wait for that kernel (WaitForPreviousKernel), not rely on the stream.
template <typename... Params, typename... Args>
absl::Status LaunchKernel(void (*kernel)(Params...), int blocks, int threads, bool early, cudaStream_t stream,
                          const char* what, Args... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return LaunchKernelWith(kernel, blocks, threads, stream, early ? &attribute : nullptr, what, args...);
}

// A cooperative launch (cudaLaunchAttributeCooperative): the runtime starts the grid only with every block
// resident at once, or fails (a grid larger than the device holds), so blocks may wait for each other inside it
// even while other kernels share the device. Not early: a plain launch after the stream's previous work.
template <typename... Params, typename... Args>
absl::Status LaunchCooperativeKernel(void (*kernel)(Params...), int blocks, int threads, cudaStream_t stream,
                                     const char* what, Args... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  return LaunchKernelWith(kernel, blocks, threads, stream, &attribute, what, args...);
}

}  // namespace kvt::collective::internal

#endif  // KVT_COLLECTIVE_CUDA_PEER_SIGNALS_CUH_
