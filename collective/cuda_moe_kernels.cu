// The CUDA MoE Dispatch/Combine kernels (cuda_moe_kernels.h). The FP8 arithmetic is fp8.cc's, operation for
// operation (fp32 division by the scale, numerics/e4m3.h's E4M3 conversion, decode as an fp32 product), and the
// combine sums are moe.cc's (products and sums each rounded once, in the same order: compiled with
// --fmad=false), so the bytes are the CPU reference's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "numerics/e4m3.h"
#include "collective/cuda_group_codec.cuh"
#include "collective/cuda_moe_kernels.h"
#include "collective/cuda_peer_signals.cuh"

namespace kvt::collective::internal {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTokensPerBlock = 64;  // DispatchSend's shared routing table
constexpr float kFp8Max = numerics::kE4m3Max;

// fp8.cc's group scale for a group whose largest magnitude is `amax`.
__device__ __forceinline__ float Fp8Scale(float amax) {
  float scale = __fdiv_rn(amax, kFp8Max);
  if (amax > 0.0f && scale == 0.0f) scale = __uint_as_float(1u);  // the smallest subnormal
  while (amax > 0.0f && __fdiv_rn(amax, scale) > kFp8Max) scale = nextafterf(scale, INFINITY);
  return scale;
}

// ---- records ----------------------------------------------------------------------------------------------

__device__ __forceinline__ uint8_t* RecordAt(const MoeCall& c, int dst, int src, int row) {
  return c.slots[dst] + (static_cast<uint64_t>(src) * c.layout.max_tokens + row) * c.layout.record_bytes;
}

__device__ __forceinline__ void NoteBadRoute(const MoeCall& c, uint64_t slot) {
  atomicMin(&c.status->first_bad_route, static_cast<unsigned long long>(slot));
  atomicOr(&c.status->errors, static_cast<unsigned>(kBadRouting));
}

// The rank of slot k of token t, or -1 for an unused or bad slot (a bad one is reported when `report`).
__device__ __forceinline__ int SlotRank(const MoeCall& c, const int32_t* experts, const float* weights, int t, int k,
                                        bool report) {
  const MoeLayout& l = c.layout;
  const uint64_t slot = static_cast<uint64_t>(t) * l.topk + k;
  const int32_t e = __ldg(experts + slot);
  if (e == -1) return -1;
  const bool bad = e < -1 || e >= l.experts_per_rank * l.world || !isfinite(__ldg(weights + slot));
  if (bad) {
    if (report) NoteBadRoute(c, slot);
    return -1;
  }
  return e / l.experts_per_rank;
}

__device__ __forceinline__ uint32_t RankMask(const MoeCall& c, const int32_t* experts, const float* weights, int t,
                                             bool report) {
  uint32_t mask = 0;
  for (int k = 0; k < c.layout.topk; ++k) {
    const int r = SlotRank(c, experts, weights, t, k, report);
    if (r >= 0) mask |= 1u << r;
  }
  return mask;
}

// ---- Dispatch ---------------------------------------------------------------------------------------------

// Encodes 16 values (unit u of token t) and stores them into every rank of `mask`. FP8: a group of G values is
// G / 16 consecutive threads of a warp (G <= 512), which agree on its scale by shuffles; every thread of the
// warp takes part, `live` or not.
template <typename T, bool kFp8>
__device__ __forceinline__ void SendUnit(const MoeCall& c, const T* token, int t, int u, bool live, uint32_t mask,
                                         const int* rows) {
  const MoeLayout& l = c.layout;
  float v[kPerThread];
  LoadElements(token + static_cast<size_t>(u) * kPerThread, live ? kPerThread : 0, v);
  bool finite = true;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    finite &= isfinite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  if (live && !finite) {
    for (int i = 0; i < kPerThread; ++i) {
      if (!isfinite(v[i])) {
        atomicMin(&c.status->first_bad_input,
                  static_cast<unsigned long long>(t) * l.hidden + static_cast<unsigned long long>(u) * kPerThread + i);
        break;
      }
    }
    atomicOr(&c.status->errors, static_cast<unsigned>(kBadInput));
  }
  if constexpr (kFp8) {
    const int lanes = l.group_size / kPerThread;
    for (int offset = lanes / 2; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (!live) return;
    const float scale = Fp8Scale(amax);
    uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const uint32_t code = scale == 0.0f ? 0u : numerics::FloatToE4m3(__fdiv_rn(v[i], scale));
      words[i / 4] |= code << (8 * (i % 4));
    }
    const uint4 packed = make_uint4(words[0], words[1], words[2], words[3]);
    const int group = u / lanes;
    const bool leader = u % lanes == 0;
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      const int d = __ffs(m) - 1;
      uint8_t* payload = RecordAt(c, d, l.rank, rows[d]) + l.header_bytes;
      if (leader) reinterpret_cast<float*>(payload)[group] = scale;
      *reinterpret_cast<uint4*>(payload + l.scale_bytes + static_cast<size_t>(u) * kPerThread) = packed;
    }
  } else {
    if (!live) return;
    constexpr int kVectors = kPerThread * sizeof(T) / 16;
    uint4 raw[kVectors];
    const uint4* src = reinterpret_cast<const uint4*>(token + static_cast<size_t>(u) * kPerThread);
#pragma unroll
    for (int i = 0; i < kVectors; ++i) raw[i] = src[i];
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      const int d = __ffs(m) - 1;
      uint4* dst = reinterpret_cast<uint4*>(RecordAt(c, d, l.rank, rows[d]) + l.header_bytes +
                                            static_cast<size_t>(u) * kPerThread * sizeof(T));
#pragma unroll
      for (int i = 0; i < kVectors; ++i) dst[i] = raw[i];
    }
  }
}

// This call's epoch (MoeEpoch): one more than the last finished call's of its kind and parity.
__device__ __forceinline__ uint64_t CallEpoch(const MoeCall& c) {
  uint64_t e;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(e) : "l"(&c.epoch->epoch) : "memory");
  return e + 1;
}

// The receive kernel's end, in every block: once all have arrived (each read the epoch when it started), the last
// stores the epoch, which the next call of this kind and parity reads after this kernel has finished.
__device__ __forceinline__ void FinishCall(const MoeCall& c, uint64_t epoch) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (atomicAdd(&c.epoch->arrivals, 1u) == gridDim.x - 1) {
    c.epoch->arrivals = 0;
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(&c.epoch->epoch), "l"(epoch) : "memory");
  }
}

template <typename T, bool kFp8>
__global__ void __launch_bounds__(kThreads) DispatchSendKernel(const T* __restrict__ tokens,
                                                               const int32_t* __restrict__ experts,
                                                               const float* __restrict__ weights, int num_tokens,
                                                               DispatchState state,
                                                               const __grid_constant__ MoeCall c) {
  const uint64_t epoch = CallEpoch(c);  // a plain launch: the previous call of this kind and parity has finished
  LaunchDependents();
  const MoeLayout& l = c.layout;
  __shared__ int prefix[kMaxCudaWorld];
  __shared__ uint32_t masks[kMaxTokensPerBlock];
  __shared__ int rows[kMaxTokensPerBlock][kMaxCudaWorld];
  const int per_block = (num_tokens + gridDim.x - 1) / gridDim.x;
  const int first = min(num_tokens, static_cast<int>(blockIdx.x) * per_block);
  const int end = min(num_tokens, first + per_block);
  if (threadIdx.x < kMaxCudaWorld) prefix[threadIdx.x] = 0;
  __syncthreads();
  // Rows taken on each rank by the tokens before this block's, and this block's own routing.
  for (int t = threadIdx.x; t < first; t += blockDim.x) {
    for (uint32_t m = RankMask(c, experts, weights, t, false); m != 0; m &= m - 1) atomicAdd(&prefix[__ffs(m) - 1], 1);
  }
  for (int t = first + static_cast<int>(threadIdx.x); t < end; t += blockDim.x) {
    masks[t - first] = RankMask(c, experts, weights, t, true);
  }
  __syncthreads();
  if (threadIdx.x < l.world) {
    const int d = threadIdx.x;
    int next = prefix[d];
    for (int t = first; t < end; ++t) {
      const bool sent = (masks[t - first] >> d) & 1u;
      rows[t - first][d] = sent ? next : -1;
      state.positions[static_cast<size_t>(t) * l.world + d] = sent ? next : -1;
      next += sent ? 1 : 0;
    }
    if (end == num_tokens) state.sent_counts[d] = next;  // the last range knows the totals
  }
  __syncthreads();

  const int units = l.hidden / kPerThread;
  const int unit_span = (units + 31) / 32 * 32;  // whole warps, for the group shuffles
  for (int t = first; t < end; ++t) {
    const uint32_t mask = masks[t - first];
    if (mask == 0) continue;
    const int* token_rows = rows[t - first];
    // Header: word 0 the source index, word 1 zero, then (local expert or -1, weight) per slot as rank d sees it.
    const int words = 2 + 2 * l.topk;
    for (int w = threadIdx.x; w < words; w += blockDim.x) {
      int32_t local = -1;
      float weight = 0.0f;
      int k = (w - 2) / 2;
      int32_t e = -1;
      if (w >= 2) {
        const int r = SlotRank(c, experts, weights, t, k, false);
        if (r >= 0) {
          e = experts[static_cast<size_t>(t) * l.topk + k];
          weight = weights[static_cast<size_t>(t) * l.topk + k];
        }
      }
      for (uint32_t m = mask; m != 0; m &= m - 1) {
        const int d = __ffs(m) - 1;
        int32_t* header = reinterpret_cast<int32_t*>(RecordAt(c, d, l.rank, token_rows[d]));
        if (w == 0) {
          header[0] = t;
        } else if (w == 1) {
          header[1] = 0;
        } else {
          local = (e >= 0 && e / l.experts_per_rank == d) ? e - d * l.experts_per_rank : -1;
          header[w] = (w % 2 == 0) ? local : __float_as_int(local >= 0 ? weight : 0.0f);
        }
      }
    }
    const T* token = tokens + static_cast<size_t>(t) * l.hidden;
    for (int u = threadIdx.x; u < unit_span; u += blockDim.x) {
      SendUnit<T, kFp8>(c, token, t, u, u < units, mask, token_rows);
    }
  }
  SignalSpec s{c.flags, l.world, l.rank, c.signal_word, c.tag_word, epoch, c.call_tag, c.timeout_ns, c.status};
  s.counts = state.sent_counts;
  s.count_word = c.count_word;
  ArriveAndSignal(s);
}

template <typename T, bool kFp8>
__global__ void __launch_bounds__(kThreads) DispatchReceiveKernel(DispatchState state,
                                                                  const __grid_constant__ MoeCall c) {
  const MoeLayout& l = c.layout;
  const uint64_t epoch = CallEpoch(c);
  const SignalSpec s{c.flags, l.world, l.rank, c.signal_word, c.tag_word, epoch, c.call_tag, c.timeout_ns, c.status};
  __shared__ int counts[kMaxCudaWorld];
  const bool ok = WaitForPeers(s);
  if (threadIdx.x < l.world) {
    int n = 0;
    if (ok) {
      const uint64_t announced = LoadAcquireSys(c.flags[l.rank] + c.count_word + threadIdx.x);
      if (announced <= static_cast<uint64_t>(l.max_tokens)) {
        n = static_cast<int>(announced);
      } else {
        atomicOr(&c.status->errors, static_cast<unsigned>(kPeerBadData));
        atomicMin(&c.status->reporter, static_cast<int>(threadIdx.x));
      }
    }
    counts[threadIdx.x] = n;
    if (blockIdx.x == 0) state.counts[threadIdx.x] = n;
  }
  __syncthreads();
  const int units = l.hidden / kPerThread;
  const int lanes = l.group_size / kPerThread;
  const int all_rows = l.world * l.max_tokens;
  for (int row = blockIdx.x; row < all_rows; row += gridDim.x) {
    const int src = row / l.max_tokens;
    const int i = row - src * l.max_tokens;
    if (i >= counts[src]) continue;
    const uint8_t* record = RecordAt(c, l.rank, src, i);
    const int32_t* header = reinterpret_cast<const int32_t*>(record);
    if (threadIdx.x == 0) state.source_index[row] = header[0];
    if (threadIdx.x < l.topk) {
      int32_t local = header[2 + 2 * threadIdx.x];
      float weight = __int_as_float(header[3 + 2 * threadIdx.x]);
      if (local < -1 || local >= l.experts_per_rank) {
        atomicOr(&c.status->errors, static_cast<unsigned>(kPeerBadData));
        atomicMin(&c.status->reporter, src);
        local = -1;
        weight = 0.0f;
      }
      state.slot_expert[static_cast<size_t>(row) * l.topk + threadIdx.x] = local;
      state.slot_weight[static_cast<size_t>(row) * l.topk + threadIdx.x] = weight;
    }
    const uint8_t* payload = record + l.header_bytes;
    T* out = static_cast<T*>(state.rows) + static_cast<size_t>(row) * l.hidden;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      float v[kPerThread];
      if constexpr (kFp8) {
        const float scale = reinterpret_cast<const float*>(payload)[u / lanes];
        const uint4 packed =
            *reinterpret_cast<const uint4*>(payload + l.scale_bytes + static_cast<size_t>(u) * kPerThread);
        const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
          v[k] = __fmul_rn(numerics::E4m3ToFloat((words[k / 4] >> (8 * (k % 4))) & 0xffu), scale);
        }
      } else {
        LoadElements(reinterpret_cast<const T*>(payload) + static_cast<size_t>(u) * kPerThread, kPerThread, v);
      }
      StoreElements(out + static_cast<size_t>(u) * kPerThread, kPerThread, v);
    }
  }
  FinishCall(c, epoch);  // every block, whether or not its wait succeeded
}

// ---- Combine ----------------------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreads) CombineSendKernel(const T* __restrict__ expert_out, DispatchState state,
                                                              const __grid_constant__ MoeCall c) {
  const uint64_t epoch = CallEpoch(c);  // a plain launch, as Dispatch's send kernel
  LaunchDependents();
  const MoeLayout& l = c.layout;
  const int units = l.hidden / kPerThread;
  const int all_rows = l.world * l.max_tokens;
  for (int row = blockIdx.x; row < all_rows; row += gridDim.x) {
    const int src = row / l.max_tokens;
    const int i = row - src * l.max_tokens;
    if (i >= state.counts[src]) continue;
    T* dst = reinterpret_cast<T*>(c.slots[src] + (static_cast<uint64_t>(l.rank) * l.max_tokens + i) * l.row_bytes);
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      float sum[kPerThread];
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) sum[k] = 0.0f;
      for (int k = 0; k < l.topk; ++k) {
        const size_t slot = static_cast<size_t>(row) * l.topk + k;
        if (state.slot_expert[slot] < 0) continue;
        const float w = state.slot_weight[slot];
        float y[kPerThread];
        LoadElements(expert_out + slot * l.hidden + static_cast<size_t>(u) * kPerThread, kPerThread, y);
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) sum[j] = __fadd_rn(sum[j], __fmul_rn(w, y[j]));
      }
      StoreElements(dst + static_cast<size_t>(u) * kPerThread, kPerThread, sum);
    }
  }
  ArriveAndSignal(SignalSpec{c.flags, l.world, l.rank, c.signal_word, c.tag_word, epoch, c.call_tag, c.timeout_ns,
                             c.status});
}

template <typename T>
__global__ void __launch_bounds__(kThreads) CombineReceiveKernel(T* __restrict__ out, int num_tokens,
                                                                 DispatchState state,
                                                                 const __grid_constant__ MoeCall c) {
  const MoeLayout& l = c.layout;
  const uint64_t epoch = CallEpoch(c);
  const SignalSpec s{c.flags, l.world, l.rank, c.signal_word, c.tag_word, epoch, c.call_tag, c.timeout_ns, c.status};
  const int units = l.hidden / kPerThread;
  const int tokens = WaitForPeers(s) ? num_tokens : 0;  // every block still arrives below
  for (int t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int32_t* rows = state.positions + static_cast<size_t>(t) * l.world;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      float sum[kPerThread];
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) sum[k] = 0.0f;
      for (int d = 0; d < l.world; ++d) {
        const int row = rows[d];
        if (row < 0) continue;
        const T* partial = reinterpret_cast<const T*>(
            c.slots[l.rank] + (static_cast<uint64_t>(d) * l.max_tokens + row) * l.row_bytes);
        float v[kPerThread];
        LoadElements(partial + static_cast<size_t>(u) * kPerThread, kPerThread, v);
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) sum[j] = __fadd_rn(sum[j], v[j]);
      }
      StoreElements(out + static_cast<size_t>(t) * l.hidden + static_cast<size_t>(u) * kPerThread, kPerThread, sum);
    }
  }
  FinishCall(c, epoch);
}

// ---- launches ---------------------------------------------------------------------------------------------

int SendBlocks(int num_tokens, int sms) {
  const int wanted = std::min(num_tokens, 4 * sms);
  const int needed = (num_tokens + kMaxTokensPerBlock - 1) / kMaxTokensPerBlock;
  return std::max(1, std::max(wanted, needed));
}

// The receive kernels are launched early (programmatic dependents of the send kernels) when `early`: they wait
// on the peers' signals, which order every record they read; the send kernels are launched plainly, after the
// stream's earlier work (the previous call's receive must be done with the slots before they are rewritten).
template <typename T>
absl::Status LaunchDispatchTyped(const void* tokens, const int32_t* experts, const float* weights, int num_tokens,
                                 const DispatchState& state, const MoeCall& c, bool early, cudaStream_t stream) {
  const int send_blocks = SendBlocks(num_tokens, c.sms);
  const int receive_blocks = std::max(1, std::min(c.layout.world * c.layout.max_tokens, 4 * c.sms));
  const auto send = c.layout.fp8 ? DispatchSendKernel<T, true> : DispatchSendKernel<T, false>;
  const auto receive = c.layout.fp8 ? DispatchReceiveKernel<T, true> : DispatchReceiveKernel<T, false>;
  if (absl::Status s = LaunchKernel(send, send_blocks, kThreads, false, stream, "Dispatch send kernel",
                                    static_cast<const T*>(tokens), experts, weights, num_tokens, state, c);
      !s.ok()) {
    return s;
  }
  return LaunchKernel(receive, receive_blocks, kThreads, early, stream, "Dispatch receive kernel", state, c);
}

template <typename T>
absl::Status LaunchCombineTyped(const void* expert_out, void* out, int num_tokens, const DispatchState& state,
                                const MoeCall& c, bool early, cudaStream_t stream) {
  const int send_blocks = std::max(1, std::min(c.layout.world * c.layout.max_tokens, 4 * c.sms));
  if (absl::Status s = LaunchKernel(CombineSendKernel<T>, send_blocks, kThreads, false, stream, "Combine send kernel",
                                    static_cast<const T*>(expert_out), state, c);
      !s.ok()) {
    return s;
  }
  const int receive_blocks = std::max(1, std::min(num_tokens, 4 * c.sms));
  return LaunchKernel(CombineReceiveKernel<T>, receive_blocks, kThreads, early, stream, "Combine receive kernel",
                      static_cast<T*>(out), num_tokens, state, c);
}

template <typename T>
absl::Status LoadTyped() {
  cudaFuncAttributes a;
  const void* kernels[] = {
      reinterpret_cast<const void*>(DispatchSendKernel<T, true>),
      reinterpret_cast<const void*>(DispatchSendKernel<T, false>),
      reinterpret_cast<const void*>(DispatchReceiveKernel<T, true>),
      reinterpret_cast<const void*>(DispatchReceiveKernel<T, false>),
      reinterpret_cast<const void*>(CombineSendKernel<T>),
      reinterpret_cast<const void*>(CombineReceiveKernel<T>),
  };
  for (const void* k : kernels) {
    const cudaError_t e = cudaFuncGetAttributes(&a, k);
    if (e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("loading the MoE kernels: ", cudaGetErrorName(e), " (",
                                              cudaGetErrorString(e), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadMoeKernels() {
  if (absl::Status s = LoadTyped<float>(); !s.ok()) return s;
  if (absl::Status s = LoadTyped<__nv_bfloat16>(); !s.ok()) return s;
  return LoadTyped<__half>();
}

void FinishMoeLayout(MoeLayout& l) {
  const auto align16 = [](uint64_t b) { return static_cast<uint32_t>((b + 15) / 16 * 16); };
  const size_t element = numerics::DTypeBytes(l.type);
  l.header_bytes = align16(8 + 8 * static_cast<uint64_t>(l.topk));
  const uint64_t groups = (static_cast<uint64_t>(l.hidden) + l.group_size - 1) / l.group_size;
  l.scale_bytes = l.fp8 ? align16(groups * sizeof(float)) : 0;
  l.payload_bytes = align16(l.fp8 ? l.scale_bytes + l.hidden : static_cast<uint64_t>(l.hidden) * element);
  l.record_bytes = l.header_bytes + l.payload_bytes;
  l.row_bytes = align16(static_cast<uint64_t>(l.hidden) * element);
}

uint64_t DispatchSlotsOffset(const MoeLayout& l, int parity) {
  return static_cast<uint64_t>(parity) * l.world * l.max_tokens * l.record_bytes;
}

uint64_t CombineSlotsOffset(const MoeLayout& l, int parity) {
  return DispatchSlotsOffset(l, 2) + static_cast<uint64_t>(parity) * l.world * l.max_tokens * l.row_bytes;
}

uint64_t MoeAreaBytes(const MoeLayout& l) { return CombineSlotsOffset(l, 2); }

absl::Status LaunchDispatch(const void* tokens, const int32_t* experts, const float* weights, int num_tokens,
                            const DispatchState& state, const MoeCall& call, bool early_launch, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (call.layout.type) {
    case DataType::kFloat32:
      return LaunchDispatchTyped<float>(tokens, experts, weights, num_tokens, state, call, early_launch, s);
    case DataType::kBfloat16:
      return LaunchDispatchTyped<__nv_bfloat16>(tokens, experts, weights, num_tokens, state, call, early_launch, s);
    case DataType::kFloat16:
      return LaunchDispatchTyped<__half>(tokens, experts, weights, num_tokens, state, call, early_launch, s);
  }
  return absl::InvalidArgumentError("unknown element type");
}

absl::Status LaunchCombine(const void* expert_out, void* out, int num_tokens, const DispatchState& state,
                           const MoeCall& call, bool early_launch, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (call.layout.type) {
    case DataType::kFloat32:
      return LaunchCombineTyped<float>(expert_out, out, num_tokens, state, call, early_launch, s);
    case DataType::kBfloat16:
      return LaunchCombineTyped<__nv_bfloat16>(expert_out, out, num_tokens, state, call, early_launch, s);
    case DataType::kFloat16:
      return LaunchCombineTyped<__half>(expert_out, out, num_tokens, state, call, early_launch, s);
  }
  return absl::InvalidArgumentError("unknown element type");
}

}  // namespace kvt::collective::internal
