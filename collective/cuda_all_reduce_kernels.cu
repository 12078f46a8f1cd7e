// The CUDA two-step AllReduce kernels (cuda_all_reduce_kernels.h): the round's geometry, the signals between
// ranks, and the three kernels. One group's encode and decode is in cuda_group_codec.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "collective/cuda_all_reduce_kernels.h"
#include "collective/cuda_group_codec.cuh"
#include "collective/cuda_peer_signals.cuh"

namespace kvt::collective::internal {
namespace {

constexpr int kThreads = 256;

// ---- AllReduce geometry ---------------------------------------------------------------------------------

struct Shard {
  uint64_t begin, size, enc1, enc2;
  uint32_t groups;
};

__host__ __device__ __forceinline__ Shard ShardOfClass(const ChunkClass& c, int j) {
  const bool big = j < c.extra;
  Shard s;
  s.begin = j * c.base + static_cast<uint64_t>(j < c.extra ? j : c.extra);
  s.size = c.base + (big ? 1 : 0);
  s.groups = static_cast<uint32_t>(big ? c.groups_big : c.groups_small);
  s.enc1 = big ? c.enc1_big : c.enc1_small;
  s.enc2 = big ? c.enc2_big : c.enc2_small;
  return s;
}

// Bytes before shard j's slot in a chunk's step-2 slots.
__host__ __device__ __forceinline__ uint64_t Step2Prefix(const ChunkClass& c, int j) {
  const uint64_t big = static_cast<uint64_t>(j < c.extra ? j : c.extra);
  return big * c.enc2_big + (static_cast<uint64_t>(j) - big) * c.enc2_small;
}

__host__ __device__ __forceinline__ uint64_t Step2Stride(const ChunkClass& full, int world) {
  return Step2Prefix(full, world);
}

// Bytes before shard j's N slots in a chunk of the one-shot region (each shard has one step-1 slot per rank).
__host__ __device__ __forceinline__ uint64_t OneShotPrefix(const ChunkClass& c, int j, int world) {
  const uint64_t big = static_cast<uint64_t>(j < c.extra ? j : c.extra);
  return (big * c.enc1_big + (static_cast<uint64_t>(j) - big) * c.enc1_small) * world;
}

// ---- signals --------------------------------------------------------------------------------------------

// This round's epoch (RoundState): one more than the last finished round's. Read when a kernel starts.
__device__ __forceinline__ uint64_t RoundEpoch(const RoundParams& p) {
  uint64_t e;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(e) : "l"(&p.state->epoch) : "memory");
  return e + 1;
}

// The round's last kernel: once every block has arrived (each read the epoch when it started), the last one
// stores the epoch, which the next round's kernels read after this kernel has finished.
__device__ __forceinline__ void FinishRound(const RoundParams& p, uint64_t epoch) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (atomicAdd(&p.state->last_kernel_arrivals, 1u) == gridDim.x - 1) {
    p.state->last_kernel_arrivals = 0;
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(&p.state->epoch), "l"(epoch) : "memory");
  }
}

// Step `step` (0 or 1) of a round: its flags and tags in every rank's flag area (FlagWords).
__device__ __forceinline__ SignalSpec StepSignal(const RoundParams& p, uint64_t epoch, int step) {
  return SignalSpec{p.flags,     p.world, p.rank,       static_cast<uint32_t>(step * p.world),
                    static_cast<uint32_t>((2 + step) * p.world), epoch, p.call_tag, p.timeout_ns, p.status};
}

// The one-shot round's flags and tags (FlagWords: after the two steps'), one set per epoch parity. A rank whose
// wait has seen every peer's signal can finish the call and signal its next one before a slower peer has
// checked this call's tags: the one-shot round has a single step, so unlike the two-step round nothing else holds
// it back. With the next call's signal in the other parity's words, the words of this call are overwritten only
// by the call after next, which needs this rank's own signal of the next call, sent after this call's checks.
__device__ __forceinline__ SignalSpec OneShotSignal(const RoundParams& p, uint64_t epoch) {
  const uint32_t parity = static_cast<uint32_t>(epoch & 1);
  return SignalSpec{p.flags,     p.world, p.rank,       static_cast<uint32_t>((4 + parity) * p.world),
                    static_cast<uint32_t>((6 + parity) * p.world), epoch, p.call_tag, p.timeout_ns, p.status};
}

__device__ __forceinline__ void ArriveAndSignal(const RoundParams& p, uint64_t epoch, int step) {
  ArriveAndSignal(StepSignal(p, epoch, step));
}

__device__ __forceinline__ bool WaitForPeers(const RoundParams& p, uint64_t epoch, int step) {
  return WaitForPeers(StepSignal(p, epoch, step));
}

// ---- unit locations -------------------------------------------------------------------------------------

// Unit u of the (chunk, shard, group) space: chunk kk (the last one is of class p.last), shard j, group g.
// 32-bit: the host keeps a round's units below 2^31.
struct Unit {
  uint32_t kk, g;
  int j;
  bool last;
};

__device__ __forceinline__ Unit LocateUnit(const RoundParams& p, uint32_t u) {
  Unit at;
  const uint32_t per_chunk = static_cast<uint32_t>(p.full.units_all);
  const uint32_t full_units = static_cast<uint32_t>(p.chunks - 1) * per_chunk;
  if (u < full_units) {
    at.kk = u / per_chunk;
    u -= at.kk * per_chunk;
    at.last = false;
  } else {
    at.kk = static_cast<uint32_t>(p.chunks - 1);
    u -= full_units;
    at.last = true;
  }
  const ChunkClass& c = at.last ? p.last : p.full;
  const uint32_t groups_big = static_cast<uint32_t>(c.groups_big);
  const uint32_t big_units = static_cast<uint32_t>(c.extra) * groups_big;
  if (u < big_units) {
    at.j = static_cast<int>(u / groups_big);
    at.g = u - static_cast<uint32_t>(at.j) * groups_big;
  } else {
    u -= big_units;
    const uint32_t groups_small = static_cast<uint32_t>(c.groups_small);
    const uint32_t jj = u / groups_small;
    at.j = c.extra + static_cast<int>(jj);
    at.g = u - jj * groups_small;
  }
  return at;
}

__device__ __forceinline__ uint32_t TotalUnits(const RoundParams& p) {
  return static_cast<uint32_t>((p.chunks - 1) * p.full.units_all + p.last.units_all);
}

__device__ __forceinline__ int ValidIn(uint64_t shard_values, uint64_t group_first, int t) {
  const int64_t left = static_cast<int64_t>(shard_values) - static_cast<int64_t>(group_first) - t * kPerThread;
  return left <= 0 ? 0 : (left >= kPerThread ? kPerThread : static_cast<int>(left));
}

// The grid-stride walk over units, in whole warps so that every team of a warp is converged for its shuffles.
struct UnitWalk {
  uint32_t first, stride;
};

__device__ __forceinline__ UnitWalk MakeWalk(const TeamInfo& team) {
  const uint32_t teams_per_warp = 32 / team.size;
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  return UnitWalk{warp * teams_per_warp + (threadIdx.x & 31) / team.size, warps * teams_per_warp};
}

// ---- kernels --------------------------------------------------------------------------------------------

// Encodes every unit (chunk, shard, group) of the round with the step-1 format, as step 1 of both kinds of round
// does, and has `targets(at, shard, write)` call write(slot) for each place the group goes (its slot's start:
// raw elements or GroupQuantizer's packed bytes land at the group's position in it). A non-finite input is
// recorded as kBadInput (raw elements pass through unchecked, as WireCommunicator's memcpy does).
template <typename T, int kBits, typename Targets>
__device__ __forceinline__ void EncodeStep1(const T* __restrict__ in, const RoundParams& p, Targets targets) {
  const int group = p.step1.group_size;
  const bool spike = p.step1.spike;
  const TeamInfo team = MakeTeam(group);
  const uint32_t total = TotalUnits(p);
  const UnitWalk walk = MakeWalk(team);
  uint64_t first_bad = ~0ull;
  for (uint32_t u = walk.first; u < total; u += walk.stride) {
    const Unit at = LocateUnit(p, u);
    const Shard shard = ShardOfClass(at.last ? p.last : p.full, at.j);
    const uint64_t first = static_cast<uint64_t>(at.g) * group;
    const int valid = ValidIn(shard.size, first, team.t);
    const uint64_t value_index = at.kk * p.chunk_values + shard.begin + first + team.t * kPerThread;
    float v[kPerThread];
    LoadElements(in + value_index, valid, v);
    if constexpr (kBits == 0) {
      targets(at, shard, [&](uint8_t* slot) {
        StoreElements(reinterpret_cast<T*>(slot) + first + team.t * kPerThread, valid, v);
      });
    } else {
      bool group_bad = false;
      const Piece<kBits> piece = EncodeGroup<kBits>(spike, v, valid, team, &group_bad);
      if (group_bad) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          if (i < valid && !isfinite(v[i]) && first_bad == ~0ull) first_bad = p.call_offset + value_index + i;
        }
      }
      const GroupPlace<kBits> place = PlaceGroup<kBits>(p.step1.header_bytes, shard.size, shard.groups, at.g);
      targets(at, shard, [&](uint8_t* slot) { StorePiece<kBits>(spike, piece, place, first, team.t, slot); });
    }
  }
  if (first_bad != ~0ull) {
    atomicMin(&p.status->first_bad_input, first_bad);
    atomicOr(&p.status->errors, static_cast<unsigned>(kBadInput));
  }
}

// Step 1 of the two-step round: shard j of every chunk into rank j's step-1 area, slot [chunk][me].
template <typename T, int kBits>
__device__ __forceinline__ void ScatterBody(const T* __restrict__ in, const RoundParams& p) {
  EncodeStep1<T, kBits>(in, p, [&](const Unit& at, const Shard& shard, auto&& write) {
    const uint64_t full_enc1 = ShardOfClass(p.full, at.j).enc1;
    write(p.step1_area[at.j] + at.kk * p.world * full_enc1 + p.rank * shard.enc1);
  });
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 3) ReduceScatterPushKernel(const T* __restrict__ in,
                                                                    const __grid_constant__ RoundParams p) {
  // Launched early too, its blocks start during the stream's previous kernel: that kernel's output may be this
  // call's input, and peers' step-1 slots may be overwritten only once this rank's previous round has finished
  // (its last kernel saw every rank's step-2 signal, so every rank is done reading them). Both hold once the
  // previous kernel has finished. Only then may the step-2 kernel start: its wait for the peers' signals has a
  // deadline, whose clock must not run while this kernel waits on someone else's kernel.
  WaitForPreviousKernel();
  const uint64_t epoch = RoundEpoch(p);  // the previous round's last kernel has finished
  LaunchDependents();
  WithBits(p.step1.bits, [&](auto bits) { ScatterBody<T, decltype(bits)::value>(in, p); });
  ArriveAndSignal(p, epoch, 0);
}

// Decodes rank r's step-1 encoding of this unit into d, or with kAccumulate adds it to d.
template <typename T, int kBits, bool kAccumulate>
__device__ __forceinline__ void DecodeStep1(const RoundParams& p, const uint8_t* slot, const Shard& shard, uint32_t g,
                                            uint64_t first, int valid, int t, float d[kPerThread]) {
  if constexpr (kBits == 0) {
    float e[kPerThread];
    LoadElements(reinterpret_cast<const T*>(slot) + first + t * kPerThread, valid, e);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) d[i] = kAccumulate ? __fadd_rn(d[i], e[i]) : e[i];
  } else {
    DecodeGroup<kBits, kAccumulate>(p.step1.spike,
                                    PlaceGroup<kBits>(p.step1.header_bytes, shard.size, shard.groups, g), first,
                                    valid, t, slot, d);
  }
}

// The sum in fp32 of the N ranks' step-1 encodings of one group, in rank order 0..N-1 as WireCommunicator adds
// them: rank r's at slots + r * shard.enc1.
template <typename T, int kBits>
__device__ __forceinline__ void SumStep1(const RoundParams& p, const uint8_t* slots, const Shard& shard, uint32_t g,
                                         uint64_t first, int valid, int t, float sum[kPerThread]) {
  DecodeStep1<T, kBits, false>(p, slots, shard, g, first, valid, t, sum);
  for (int r = 1; r < p.world; ++r) {
    DecodeStep1<T, kBits, true>(p, slots + r * shard.enc1, shard, g, first, valid, t, sum);
  }
}

template <typename T, int kBits1>
__device__ __forceinline__ void ReduceBody(const RoundParams& p) {
  const int group = p.step1.group_size;
  const TeamInfo team = MakeTeam(group);
  const Shard full_mine = ShardOfClass(p.full, p.rank);
  const Shard last_mine = ShardOfClass(p.last, p.rank);
  const uint32_t total = static_cast<uint32_t>(p.chunks - 1) * full_mine.groups + last_mine.groups;
  const UnitWalk walk = MakeWalk(team);
  const uint64_t step2_stride = Step2Stride(p.full, p.world);
  uint64_t first_bad = ~0ull;
  for (uint32_t u = walk.first; u < total; u += walk.stride) {
    uint32_t kk = full_mine.groups == 0 ? static_cast<uint32_t>(p.chunks - 1) : u / full_mine.groups;
    if (kk > p.chunks - 1) kk = static_cast<uint32_t>(p.chunks - 1);
    const uint32_t g = u - kk * full_mine.groups;
    const bool is_last = kk == p.chunks - 1;
    const Shard shard = is_last ? last_mine : full_mine;
    const uint64_t first = static_cast<uint64_t>(g) * group;
    const int valid = ValidIn(shard.size, first, team.t);
    const uint8_t* slots = p.step1_area[p.rank] + kk * p.world * full_mine.enc1;
    float sum[kPerThread];
    SumStep1<T, kBits1>(p, slots, shard, g, first, valid, team.t, sum);
    const uint64_t step2_offset = kk * step2_stride + Step2Prefix(is_last ? p.last : p.full, p.rank);
    WithBits(p.step2.bits, [&](auto bits2) {
      constexpr int kBits2 = decltype(bits2)::value;
      if constexpr (kBits2 == 0) {
        for (int r = 0; r < p.world; ++r) {
          const int dst = (p.rank + 1 + r) % p.world;
          StoreElements(reinterpret_cast<T*>(p.step2_area[dst] + step2_offset) + first + team.t * kPerThread, valid, sum);
        }
      } else {
        bool group_bad = false;
        const Piece<kBits2> piece = EncodeGroup<kBits2>(p.step2.spike, sum, valid, team, &group_bad);
        if (group_bad) {
#pragma unroll
          for (int i = 0; i < kPerThread; ++i) {
            if (i < valid && !isfinite(sum[i]) && first_bad == ~0ull) {
              first_bad = p.call_offset + kk * p.chunk_values + shard.begin + first + team.t * kPerThread + i;
            }
          }
        }
        const GroupPlace<kBits2> place2 = PlaceGroup<kBits2>(p.step2.header_bytes, shard.size, shard.groups, g);
        for (int r = 0; r < p.world; ++r) {
          // Start with the next rank so the ranks' stores spread over the links.
          const int dst = (p.rank + 1 + r) % p.world;
          StorePiece<kBits2>(p.step2.spike, piece, place2, first, team.t, p.step2_area[dst] + step2_offset);
        }
      }
    });
  }
  if (first_bad != ~0ull) {
    atomicMin(&p.status->first_bad_sum, first_bad);
    atomicOr(&p.status->errors, static_cast<unsigned>(kBadSum));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2) ReduceGatherPushKernel(const __grid_constant__ RoundParams p) {
  const uint64_t epoch = RoundEpoch(p);  // launched after the first kernel passed its wait
  LaunchDependents();
  if (WaitForPeers(p, epoch, 0)) {
    WithBits(p.step1.bits, [&](auto bits) { ReduceBody<T, decltype(bits)::value>(p); });
  }
  ArriveAndSignal(p, epoch, 1);
}

template <typename T, int kBits>
__device__ __forceinline__ void GatherBody(T* __restrict__ out, const RoundParams& p) {
  const int group = p.step2.group_size;
  const TeamInfo team = MakeTeam(group);
  const uint32_t total = TotalUnits(p);
  const UnitWalk walk = MakeWalk(team);
  const uint64_t step2_stride = Step2Stride(p.full, p.world);
  for (uint32_t u = walk.first; u < total; u += walk.stride) {
    const Unit at = LocateUnit(p, u);
    const ChunkClass& cls = at.last ? p.last : p.full;
    const Shard shard = ShardOfClass(cls, at.j);
    const uint64_t first = static_cast<uint64_t>(at.g) * group;
    const int valid = ValidIn(shard.size, first, team.t);
    const uint8_t* slot = p.step2_area[p.rank] + at.kk * step2_stride + Step2Prefix(cls, at.j);
    float v[kPerThread];
    if constexpr (kBits == 0) {
      LoadElements(reinterpret_cast<const T*>(slot) + first + team.t * kPerThread, valid, v);
    } else {
      DecodeGroup<kBits>(p.step2.spike, PlaceGroup<kBits>(p.step2.header_bytes, shard.size, shard.groups, at.g), first,
                         valid, team.t, slot, v);
    }
    StoreElements(out + at.kk * p.chunk_values + shard.begin + first + team.t * kPerThread, valid, v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) GatherDecodeKernel(T* __restrict__ out,
                                                               const __grid_constant__ RoundParams p) {
  const uint64_t epoch = RoundEpoch(p);
  if (WaitForPeers(p, epoch, 1)) {
    WithBits(p.step2.bits, [&](auto bits) { GatherBody<T, decltype(bits)::value>(out, p); });
  }
  FinishRound(p, epoch);  // every block, whether or not its wait succeeded
}

// ---- the one-shot round (LaunchOneShotAllReduce) ----------------------------------------------------------

// Where shard j of chunk kk keeps source rank r's encoding in a one-shot region half.
__device__ __forceinline__ uint64_t OneShotSlot(const RoundParams& p, const Unit& at, const Shard& shard, int r) {
  return at.kk * OneShotPrefix(p.full, p.world, p.world) + OneShotPrefix(at.last ? p.last : p.full, at.j, p.world) +
         static_cast<uint64_t>(r) * shard.enc1;
}

// The one-shot round's step 1: each group's encoding into every rank's region (the next rank first, so the
// ranks' stores spread over the links).
template <typename T, int kBits>
__device__ __forceinline__ void OneShotPushBody(const T* __restrict__ in, const RoundParams& p, uint64_t half) {
  EncodeStep1<T, kBits>(in, p, [&](const Unit& at, const Shard& shard, auto&& write) {
    const uint64_t slot = half + OneShotSlot(p, at, shard, p.rank);
    for (int r = 0; r < p.world; ++r) write(p.one_shot_area[(p.rank + 1 + r) % p.world] + slot);
  });
}

// ReduceBody's decode and sum (every rank's encodings of a group, rank order), over every shard, into `out`.
template <typename T, int kBits>
__device__ __forceinline__ void OneShotSumBody(T* __restrict__ out, const RoundParams& p, uint64_t half) {
  const int group = p.step1.group_size;
  const TeamInfo team = MakeTeam(group);
  const uint32_t total = TotalUnits(p);
  const UnitWalk walk = MakeWalk(team);
  const uint8_t* const mine = p.one_shot_area[p.rank] + half;
  for (uint32_t u = walk.first; u < total; u += walk.stride) {
    const Unit at = LocateUnit(p, u);
    const Shard shard = ShardOfClass(at.last ? p.last : p.full, at.j);
    const uint64_t first = static_cast<uint64_t>(at.g) * group;
    const int valid = ValidIn(shard.size, first, team.t);
    const uint8_t* const slots = mine + OneShotSlot(p, at, shard, 0);
    float sum[kPerThread];
    SumStep1<T, kBits>(p, slots, shard, at.g, first, valid, team.t, sum);
    StoreElements(out + at.kk * p.chunk_values + shard.begin + first + team.t * kPerThread, valid, sum);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2) OneShotKernel(const T* __restrict__ in, T* __restrict__ out,
                                                             const __grid_constant__ RoundParams p) {
  // A plain (cooperative) launch: the previous kernel, which may have produced this call's input and was this
  // rank's previous round, has finished, so the epoch is read after its store.
  const uint64_t epoch = RoundEpoch(p);
  LaunchDependents();
  const uint64_t half = (epoch & 1) * p.one_shot_half;
  WithBits(p.step1.bits, [&](auto bits) { OneShotPushBody<T, decltype(bits)::value>(in, p, half); });
  // Every block waits for the peers inside this grid, so the grid must be resident at once (a cooperative launch).
  ArriveAndSignal(OneShotSignal(p, epoch));
  if (WaitForPeers(OneShotSignal(p, epoch))) {
    WithBits(p.step1.bits, [&](auto bits) { OneShotSumBody<T, decltype(bits)::value>(out, p, half); });
  }
  FinishRound(p, epoch);
}

// Blocks of `kernel` that fit on one SM at kThreads threads (at least 1), measured once per kernel.
template <typename Kernel>
int ResidentBlocks(Kernel kernel) {
  static const int blocks = [kernel] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0) != cudaSuccess) {
      cudaGetLastError();
      n = 1;
    }
    return n < 1 ? 1 : n;
  }();
  return blocks;
}

// Smallest index of a non-finite element of out[0, count) (NCCL-routed calls: a NaN or Inf in any rank's input
// makes the sum non-finite on every rank). Grid-stride, 16-byte vectors when `out` is 16-byte aligned.
template <typename T>
__device__ __forceinline__ bool IsFiniteElement(T x) {
  return isfinite(static_cast<float>(x));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) FindNonFiniteKernel(const T* __restrict__ out, uint64_t count,
                                                                bool aligned, DeviceStatus* status) {
  constexpr int kPerVector = 16 / sizeof(T);
  const uint64_t vectors = aligned ? count / kPerVector : 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t first_bad = ~0ull;
  for (uint64_t v = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; v < vectors; v += stride) {
    const uint4 word = reinterpret_cast<const uint4*>(out)[v];
    T x[kPerVector];
    memcpy(x, &word, 16);
#pragma unroll
    for (int i = 0; i < kPerVector; ++i) {
      if (!IsFiniteElement(x[i])) first_bad = min(first_bad, v * kPerVector + i);
    }
  }
  for (uint64_t i = vectors * kPerVector + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    if (!IsFiniteElement(out[i])) first_bad = min(first_bad, i);
  }
  if (first_bad != ~0ull) {
    atomicMin(&status->first_bad_sum, first_bad);
    atomicOr(&status->errors, static_cast<unsigned>(kBadSum));
  }
}

template <typename T>
absl::Status LaunchFindNonFiniteTyped(const void* out, uint64_t count, int sms, DeviceStatus* status,
                                      cudaStream_t stream) {
  const T* const data = static_cast<const T*>(out);
  const bool aligned = reinterpret_cast<uintptr_t>(data) % 16 == 0;
  const uint64_t items = std::max<uint64_t>(aligned ? count / (16 / sizeof(T)) : count, 1);
  const uint64_t wanted = (items + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<uint64_t>(wanted, static_cast<uint64_t>(std::max(sms, 1)) * 8));
  FindNonFiniteKernel<T><<<blocks, kThreads, 0, stream>>>(data, count, aligned, status);
  return LaunchError("AllReduce finiteness check");
}

template <typename T>
absl::Status LaunchTyped(const void* in, void* out, const RoundParams& p, bool early, cudaStream_t stream) {
  if (absl::Status s = LaunchKernel(ReduceScatterPushKernel<T>, p.sms * ResidentBlocks(ReduceScatterPushKernel<T>),
                                    kThreads, early, stream, "AllReduce step-1 kernel", static_cast<const T*>(in), p);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = LaunchKernel(ReduceGatherPushKernel<T>, p.sms * ResidentBlocks(ReduceGatherPushKernel<T>),
                                    kThreads, early, stream, "AllReduce reduce kernel", p);
      !s.ok()) {
    return s;
  }
  return LaunchKernel(GatherDecodeKernel<T>, p.sms * ResidentBlocks(GatherDecodeKernel<T>), kThreads, early, stream,
                      "AllReduce step-2 kernel", static_cast<T*>(out), p);
}

template <typename T>
absl::Status LaunchOneShotTyped(const void* in, void* out, const RoundParams& p, cudaStream_t stream) {
  // Every block waits for the peers after its own arrival, so the grid must be resident at once whatever else
  // runs on the device: a cooperative launch (the runtime starts it whole or refuses), of at most one block an
  // SM, and no more blocks than the units need (a small call's fixed cost is partly its blocks' arrivals).
  const uint32_t units = static_cast<uint32_t>((p.chunks - 1) * p.full.units_all + p.last.units_all);
  const int teams_per_block = kThreads / (p.step1.group_size / kPerThread);
  const int wanted = static_cast<int>((units + teams_per_block - 1) / teams_per_block);
  const int blocks = std::max(1, std::min(wanted, p.sms));
  return LaunchCooperativeKernel(OneShotKernel<T>, blocks, kThreads, stream, "AllReduce one-shot kernel",
                                 static_cast<const T*>(in), static_cast<T*>(out), p);
}

}  // namespace

uint64_t OneShotHalfBytes(const ChunkClass& full, int world, uint64_t chunks) {
  return chunks * OneShotPrefix(full, world, world);
}

absl::Status LaunchOneShotAllReduce(const void* in, void* out, const RoundParams& p, void* stream) {
  if (p.chunks == 0) return absl::OkStatus();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.type) {
    case DataType::kFloat32:
      return LaunchOneShotTyped<float>(in, out, p, s);
    case DataType::kBfloat16:
      return LaunchOneShotTyped<__nv_bfloat16>(in, out, p, s);
    case DataType::kFloat16:
      return LaunchOneShotTyped<__half>(in, out, p, s);
  }
  return absl::InvalidArgumentError("unknown element type");
}

uint64_t EncodedBytes(const StepFormat& f, uint64_t values, size_t raw_bytes) {
  if (f.bits == 0) return values * raw_bytes;
  const uint64_t groups = (values + f.group_size - 1) / f.group_size;
  uint64_t bytes = groups * f.header_bytes;
  for (int p = 0; p < PlaneCountOf(f.bits); ++p) bytes += PlaneBytes(values, PlaneWidthOf(f.bits, p));
  return bytes;
}

ChunkClass MakeChunkClass(uint64_t values, int world, const StepFormat& step1, const StepFormat& step2,
                          DataType type) {
  const auto align16 = [](uint64_t b) { return (b + 15) / 16 * 16; };
  const size_t raw = numerics::DTypeBytes(type);
  ChunkClass c;
  c.values = values;
  c.base = values / world;
  c.extra = static_cast<int>(values % world);
  const uint64_t group = step1.group_size;
  c.groups_big = (c.base + 1 + group - 1) / group;
  c.groups_small = (c.base + group - 1) / group;
  c.units_all = c.extra * c.groups_big + (world - c.extra) * c.groups_small;
  c.enc1_big = align16(EncodedBytes(step1, c.base + 1, raw));
  c.enc1_small = align16(EncodedBytes(step1, c.base, raw));
  c.enc2_big = align16(EncodedBytes(step2, c.base + 1, raw));
  c.enc2_small = align16(EncodedBytes(step2, c.base, raw));
  return c;
}

uint64_t Step1AreaBytes(const ChunkClass& full, int world, int rank, uint64_t chunks) {
  return chunks * world * ShardOfClass(full, rank).enc1;
}

uint64_t Step2AreaBytes(const ChunkClass& full, int world, uint64_t chunks) {
  return chunks * Step2Stride(full, world);
}

absl::Status LaunchAllReduceRound(const void* in, void* out, const RoundParams& p, bool early_launch, void* stream) {
  if (p.chunks == 0) return absl::OkStatus();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.type) {
    case DataType::kFloat32:
      return LaunchTyped<float>(in, out, p, early_launch, s);
    case DataType::kBfloat16:
      return LaunchTyped<__nv_bfloat16>(in, out, p, early_launch, s);
    case DataType::kFloat16:
      return LaunchTyped<__half>(in, out, p, early_launch, s);
  }
  return absl::InvalidArgumentError("unknown element type");
}

absl::Status LaunchFindNonFinite(const void* out, uint64_t count, DataType type, int sms, DeviceStatus* status,
                                 void* stream) {
  if (count == 0) return absl::OkStatus();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DataType::kFloat32:
      return LaunchFindNonFiniteTyped<float>(out, count, sms, status, s);
    case DataType::kBfloat16:
      return LaunchFindNonFiniteTyped<__nv_bfloat16>(out, count, sms, status, s);
    case DataType::kFloat16:
      return LaunchFindNonFiniteTyped<__half>(out, count, sms, status, s);
  }
  return absl::InvalidArgumentError("unknown element type");
}

}  // namespace kvt::collective::internal
