// The CUDA two-step AllReduce kernels (cuda_all_reduce_kernels.h). Each quantization group of G values (G a
// power of two, 16..256) is handled by a team of G / 16 threads, 16 consecutive values per thread, so every
// thread owns whole bytes of every bit plane (16 values x w bits = 2w bytes) and the per-group work (reductions,
// scale, addressing) is spread over 16 values. The arithmetic is GroupQuantizer's (quantizer.cc) operation for
// operation, in fp32 with one rounding each (rounding to a code by a magic-number add, not a conversion
// instruction), so the bytes are the CPU reference's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "transport/collective/cuda_all_reduce_kernels.h"

namespace kvt::collective::internal {
namespace {

constexpr int kThreads = 256;
// Values per thread: whole bytes of every plane (16 x w bits = 2w bytes), and per-group work spread over 16.
constexpr int kPerThread = 16;

// ---- memory-model helpers -------------------------------------------------------------------------------

__device__ __forceinline__ uint64_t LoadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void StoreReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- element types --------------------------------------------------------------------------------------

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static __device__ __forceinline__ float ToFloat(float x) { return x; }
  static __device__ __forceinline__ float FromFloat(float x) { return x; }
};
template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 FromFloat(float x) { return __float2bfloat16_rn(x); }
};
template <>
struct Elem<__half> {
  static __device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half FromFloat(float x) { return __float2half_rn(x); }
};

// Reads `valid` (0..kPerThread) elements; 16-byte vector loads when the run is whole and aligned.
template <typename T>
__device__ __forceinline__ void LoadElements(const T* src, int valid, float v[kPerThread]) {
  constexpr int kPerVector = 16 / sizeof(T);
  if (valid == kPerThread && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
#pragma unroll
    for (int k = 0; k < kPerThread / kPerVector; ++k) {
      const uint4 raw = reinterpret_cast<const uint4*>(src)[k];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < kPerVector; ++i) v[k * kPerVector + i] = Elem<T>::ToFloat(e[i]);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) v[i] = i < valid ? Elem<T>::ToFloat(src[i]) : 0.0f;
}

template <typename T>
__device__ __forceinline__ void StoreElements(T* dst, int valid, const float v[kPerThread]) {
  constexpr int kPerVector = 16 / sizeof(T);
  if (valid == kPerThread && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
#pragma unroll
    for (int k = 0; k < kPerThread / kPerVector; ++k) {
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int i = 0; i < kPerVector; ++i) e[i] = Elem<T>::FromFloat(v[k * kPerVector + i]);
      reinterpret_cast<uint4*>(dst)[k] = raw;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    if (i < valid) dst[i] = Elem<T>::FromFloat(v[i]);
  }
}

// Stores the first `n` (0..16) bytes of words[] at `dst`, as one store when whole and aligned.
__device__ __forceinline__ void StoreWords(uint8_t* dst, const uint32_t words[4], int n, int whole) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (n == whole) {
    if (n == 16 && (a & 15) == 0) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
      return;
    }
    if (n == 8 && (a & 7) == 0) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(words[0], words[1]);
      return;
    }
    if (n == 4 && (a & 3) == 0) {
      *reinterpret_cast<uint32_t*>(dst) = words[0];
      return;
    }
    if (n == 2 && (a & 1) == 0) {
      *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(words[0]);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {  // unrolled, so words[] stays in registers
    if (i < n) dst[i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
  }
}

__device__ __forceinline__ void LoadWords(const uint8_t* src, uint32_t words[4], int n, int whole) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  words[0] = words[1] = words[2] = words[3] = 0;
  if (n == whole) {
    if (n == 16 && (a & 15) == 0) {
      const uint4 w = *reinterpret_cast<const uint4*>(src);
      words[0] = w.x, words[1] = w.y, words[2] = w.z, words[3] = w.w;
      return;
    }
    if (n == 8 && (a & 7) == 0) {
      const uint2 w = *reinterpret_cast<const uint2*>(src);
      words[0] = w.x, words[1] = w.y;
      return;
    }
    if (n == 4 && (a & 3) == 0) {
      words[0] = *reinterpret_cast<const uint32_t*>(src);
      return;
    }
    if (n == 2 && (a & 1) == 0) {
      words[0] = *reinterpret_cast<const uint16_t*>(src);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (i < n) words[i / 4] |= static_cast<uint32_t>(src[i]) << (8 * (i % 4));
  }
}

// Stores the low `n` (0..8) bytes of `bits` at `dst` (headers), as one store when aligned.
__device__ __forceinline__ void StoreBytes(uint8_t* dst, uint64_t bits, int n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (n == 8 && (a & 7) == 0) {
    *reinterpret_cast<uint64_t*>(dst) = bits;
  } else if (n == 4 && (a & 3) == 0) {
    *reinterpret_cast<uint32_t*>(dst) = static_cast<uint32_t>(bits);
  } else if (n == 2 && (a & 1) == 0) {
    *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(bits);
  } else {
    for (int i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(bits >> (8 * i));
  }
}

__device__ __forceinline__ uint64_t LoadBytes(const uint8_t* src, int n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  if (n == 8 && (a & 7) == 0) return *reinterpret_cast<const uint64_t*>(src);
  if (n == 4 && (a & 3) == 0) return *reinterpret_cast<const uint32_t*>(src);
  if (n == 2 && (a & 1) == 0) return *reinterpret_cast<const uint16_t*>(src);
  uint64_t bits = 0;
  for (int i = 0; i < n; ++i) bits |= static_cast<uint64_t>(src[i]) << (8 * i);
  return bits;
}

// ---- geometry -------------------------------------------------------------------------------------------

__host__ __device__ __forceinline__ uint64_t PlaneBytes(uint64_t n, int width) { return (n * width + 7) / 8; }

// GroupQuantizer's planes (PlaneWidths) at compile time: 8 bits is one plane; below 8 the planes are the set
// bits of the width, widest first, and a plane of width w holds the code bits below it (bits & (w - 1)).
__host__ __device__ constexpr int PlaneCountOf(int bits) {
  return bits == 0 ? 0 : (bits == 8 ? 1 : ((bits >> 2) & 1) + ((bits >> 1) & 1) + (bits & 1));
}
__host__ __device__ constexpr int PlaneWidthOf(int bits, int p) {
  if (bits == 8) return 8;
  int seen = 0;
  for (int w = 4; w >= 1; w >>= 1) {
    if (bits & w) {
      if (seen == p) return w;
      ++seen;
    }
  }
  return 0;
}
__host__ __device__ constexpr int PlaneShiftOf(int bits, int p) {
  return bits == 8 ? 0 : (bits & (PlaneWidthOf(bits, p) - 1));
}

template <int kBits>
struct Planes {
  static constexpr int kCount = PlaneCountOf(kBits);
  static constexpr int kArray = kCount > 0 ? kCount : 1;
};

// Runs f(std::integral_constant<int, bits>) for a width known only at run time (uniform across the grid).
template <typename F>
__device__ __forceinline__ void WithBits(int bits, F&& f) {
  switch (bits) {
    case 0: f(std::integral_constant<int, 0>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: break;
  }
}

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

// Where a group sits inside its shard's encoding.
template <int kBits>
struct GroupPlace {
  uint64_t header;                             // offset of the group's header
  uint64_t plane_base[Planes<kBits>::kArray];  // offset of each plane's first byte
  uint64_t plane_bytes[Planes<kBits>::kArray];
};

template <int kBits>
__device__ __forceinline__ GroupPlace<kBits> PlaceGroup(int header_bytes, uint64_t shard_values, uint32_t groups,
                                                        uint32_t g) {
  GroupPlace<kBits> place;
  place.header = static_cast<uint64_t>(g) * header_bytes;
  uint64_t base = static_cast<uint64_t>(groups) * header_bytes;
#pragma unroll
  for (int p = 0; p < Planes<kBits>::kCount; ++p) {
    place.plane_base[p] = base;
    place.plane_bytes[p] = PlaneBytes(shard_values, PlaneWidthOf(kBits, p));
    base += place.plane_bytes[p];
  }
  return place;
}

// ---- one group's codec (team-cooperative) ----------------------------------------------------------------

struct TeamInfo {
  int t;          // thread index within the team
  int size;       // threads per team (G / kPerThread)
  unsigned mask;  // the team's lanes
};

__device__ __forceinline__ TeamInfo MakeTeam(int group_size) {
  TeamInfo team;
  team.size = group_size / kPerThread;
  const int lane = threadIdx.x & 31;
  team.t = lane & (team.size - 1);
  team.mask = team.size == 32 ? 0xffffffffu : (((1u << team.size) - 1u) << (lane & ~(team.size - 1)));
  return team;
}

// The encoded form of one thread's kPerThread values: 2w bytes per plane (in words, little-endian), plus the
// group header (the same on every lane of the team).
template <int kBits>
struct Piece {
  uint32_t words[Planes<kBits>::kArray][4];
  float min, scale, spike;
  uint32_t spike_index;
};

// The first index (within the group) among this team's non-spike values equal to zero, and that value's sign:
// GroupQuantizer keeps the first of equal minima (or maxima), and only zeros compare equal without being the
// same bits.
__device__ __forceinline__ float FirstZero(const float v[kPerThread], int valid, int t, int spike_local,
                                           const TeamInfo& team) {
  int key = INT_MAX;
#pragma unroll
  for (int i = kPerThread - 1; i >= 0; --i) {
    const int index = t * kPerThread + i;
    if (i < valid && index != spike_local && v[i] == 0.0f) key = index * 2 + (signbit(v[i]) ? 1 : 0);
  }
  for (int o = team.size / 2; o > 0; o >>= 1) key = min(key, __shfl_xor_sync(team.mask, key, o, team.size));
  return (key & 1) ? -0.0f : 0.0f;
}

// round_half_even(t) for 0 <= t < 2^22: adding 1.5 * 2^23 leaves a float whose unit is 1, rounded to nearest even
// by the add itself; cheaper than a conversion instruction and the same result as nearbyintf.
__device__ __forceinline__ uint32_t RoundToCode(float t) {
  return __float_as_uint(__fadd_rn(t, 12582912.0f)) - 0x4B400000u;
}

// float(code) for code < 2^23, without a conversion instruction.
__device__ __forceinline__ float CodeToFloat(uint32_t code) {
  return __fsub_rn(__uint_as_float(0x4B000000u | code), 8388608.0f);
}

// Quantizes the team's group (values v[0, valid) of each thread) as GroupQuantizer::Quantize does. Sets *bad
// when a value is not finite.
template <int kBits>
__device__ __forceinline__ Piece<kBits> EncodeGroup(bool spike, const float v[kPerThread], int valid,
                                                    const TeamInfo& team, bool* bad) {
  Piece<kBits> piece;
  const int t = team.t;
  int spike_local = INT_MAX;  // the spike's index within the group, or none
  piece.spike = 0.0f;
  piece.spike_index = 0;
  if (spike) {
    float best = -1.0f;
    int best_index = INT_MAX;
    float best_value = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const float a = fabsf(v[i]);
      if (i < valid && a > best) {
        best = a;
        best_index = t * kPerThread + i;
        best_value = v[i];
      }
    }
    for (int o = team.size / 2; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(team.mask, best, o, team.size);
      const int other_index = __shfl_xor_sync(team.mask, best_index, o, team.size);
      const float other_value = __shfl_xor_sync(team.mask, best_value, o, team.size);
      if (other > best || (other == best && other_index < best_index)) {
        best = other;
        best_index = other_index;
        best_value = other_value;
      }
    }
    spike_local = best_index;
    piece.spike_index = static_cast<uint32_t>(best_index);
    piece.spike = best_value;
  }
  float lo = INFINITY, hi = -INFINITY;
  bool any_bad = false;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    if (i < valid) {
      any_bad |= !(fabsf(v[i]) <= FLT_MAX);
      if (t * kPerThread + i != spike_local) {
        lo = fminf(lo, v[i]);
        hi = fmaxf(hi, v[i]);
      }
    }
  }
  if (any_bad) *bad = true;
  for (int o = team.size / 2; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(team.mask, lo, o, team.size));
    hi = fmaxf(hi, __shfl_xor_sync(team.mask, hi, o, team.size));
  }
  if (lo == INFINITY) {  // no value outside the spike: GroupQuantizer's empty range
    lo = 0.0f;
    hi = 0.0f;
  } else {
    if (lo == 0.0f) lo = FirstZero(v, valid, t, spike_local, team);
    if (hi == 0.0f) hi = FirstZero(v, valid, t, spike_local, team);
  }
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  piece.min = lo;
  const double range = __dsub_rn(static_cast<double>(hi), static_cast<double>(lo));
  piece.scale = __double2float_rn(__ddiv_rn(range, static_cast<double>(kMaxCode)));
  const float inverse = piece.scale > 0.0f ? __fdiv_rn(1.0f, piece.scale) : 0.0f;
  uint32_t codes[kPerThread];
  if (range <= static_cast<double>(FLT_MAX) && isfinite(inverse)) {  // fp32, as GroupQuantizer
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const float q = __fmul_rn(__fsub_rn(v[i], lo), inverse);
      codes[i] = q <= 0.0f ? 0u : (q >= static_cast<float>(kMaxCode) ? kMaxCode : RoundToCode(q));
    }
  } else {  // a range or inverse beyond fp32: GroupQuantizer's double fallback
    const double inverse_wide = piece.scale > 0.0f ? __ddiv_rn(1.0, static_cast<double>(piece.scale)) : 0.0;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const double q = __dmul_rn(__dsub_rn(static_cast<double>(v[i]), static_cast<double>(lo)), inverse_wide);
      codes[i] = q <= 0.0 ? 0u : (q >= static_cast<double>(kMaxCode) ? kMaxCode : static_cast<uint32_t>(rint(q)));
    }
  }
#pragma unroll
  for (int p = 0; p < Planes<kBits>::kCount; ++p) {
    piece.words[p][0] = piece.words[p][1] = piece.words[p][2] = piece.words[p][3] = 0;
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const uint32_t code = (i < valid && t * kPerThread + i != spike_local && !any_bad) ? codes[i] : 0u;
#pragma unroll
    for (int p = 0; p < Planes<kBits>::kCount; ++p) {
      const int w = PlaneWidthOf(kBits, p);
      const uint32_t part = (code >> PlaneShiftOf(kBits, p)) & ((1u << w) - 1u);
      piece.words[p][(i * w) / 32] |= part << ((i * w) % 32);
    }
  }
  return piece;
}

// Writes a piece into the slot at `slot` (a shard's encoding): the header from the team's first thread, and this
// thread's bytes of every plane, clipped to the plane's end.
template <int kBits>
__device__ __forceinline__ void StorePiece(bool spike, const Piece<kBits>& piece, const GroupPlace<kBits>& place,
                                           uint64_t group_first, int t, uint8_t* slot) {
  if (t == 0) {
    uint8_t* h = slot + place.header;
    if (spike) {
      uint4 word;
      word.x = __float_as_uint(piece.min);
      word.y = __float_as_uint(piece.scale);
      word.z = __float_as_uint(piece.spike);
      word.w = piece.spike_index;
      *reinterpret_cast<uint4*>(h) = word;  // 16-aligned: slots are, and headers are 16 bytes
    } else {
      StoreBytes(h, static_cast<uint64_t>(__float_as_uint(piece.min)) |
                        (static_cast<uint64_t>(__float_as_uint(piece.scale)) << 32),
                 8);
    }
  }
  const uint64_t unit = group_first / kPerThread + t;  // this thread's run of kPerThread values in the shard
#pragma unroll
  for (int p = 0; p < Planes<kBits>::kCount; ++p) {
    const int whole = 2 * PlaneWidthOf(kBits, p);  // bytes of kPerThread codes
    const uint64_t at = unit * whole;
    if (at < place.plane_bytes[p]) {
      const int n = static_cast<int>(min(static_cast<uint64_t>(whole), place.plane_bytes[p] - at));
      StoreWords(slot + place.plane_base[p] + at, piece.words[p], n, whole);
    }
  }
}

// Decodes this thread's values of a group from the slot, as GroupQuantizer::Dequantize does.
// With kAccumulate, adds the decoded values to v (fp32, in order) instead of storing them.
template <int kBits, bool kAccumulate = false>
__device__ __forceinline__ void DecodeGroup(bool spike, const GroupPlace<kBits>& place, uint64_t group_first,
                                            int valid, int t, const uint8_t* slot, float v[kPerThread]) {
  const uint64_t head = LoadBytes(slot + place.header, 8);
  const float lo = __uint_as_float(static_cast<uint32_t>(head));
  const float scale = __uint_as_float(static_cast<uint32_t>(head >> 32));
  uint32_t words[Planes<kBits>::kArray][4];
  const uint64_t unit = group_first / kPerThread + t;
#pragma unroll
  for (int p = 0; p < Planes<kBits>::kCount; ++p) {
    const int whole = 2 * PlaneWidthOf(kBits, p);
    const uint64_t at = unit * whole;
    const int n = at < place.plane_bytes[p] ? static_cast<int>(min(static_cast<uint64_t>(whole), place.plane_bytes[p] - at)) : 0;
    LoadWords(slot + place.plane_base[p] + at, words[p], n, whole);
  }
  uint32_t codes[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    uint32_t code = 0;
#pragma unroll
    for (int p = 0; p < Planes<kBits>::kCount; ++p) {
      const int w = PlaneWidthOf(kBits, p);
      code |= ((words[p][(i * w) / 32] >> ((i * w) % 32)) & ((1u << w) - 1u)) << PlaneShiftOf(kBits, p);
    }
    codes[i] = code;
  }
  int index = -1;
  float spike_value = 0.0f;
  if (spike) {
    const uint64_t word = LoadBytes(slot + place.header + 8, 8);
    index = static_cast<int>(word >> 32) - t * kPerThread;
    spike_value = __uint_as_float(static_cast<uint32_t>(word));
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    float x = i < valid ? __fmaf_rn(CodeToFloat(codes[i]), scale, lo) : 0.0f;
    if (i == index && i < valid) x = spike_value;
    v[i] = kAccumulate ? __fadd_rn(v[i], x) : x;
  }
}

// ---- signals --------------------------------------------------------------------------------------------

// Called by every block when its work is done: the last block to arrive signals step `step` (0 or 1) to every
// rank with this round's epoch and the error bits so far.
__device__ void ArriveAndSignal(const RoundParams& p, int step) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence_system();  // this block's stores, peer memory included, before the arrival
  const unsigned prev = atomicAdd(&p.status->arrivals, 1u);
  if (prev != gridDim.x - 1) return;
  p.status->arrivals = 0;
  __threadfence_system();
  const unsigned errors = atomicOr(&p.status->errors, 0u);
  uint64_t value = p.epoch * 4;
  if (errors & (kBadInput | kBadSum | kPeerBadData | kMismatch)) value |= kSignalBadData;
  if (errors & (kTimedOut | kPeerTimedOut)) value |= kSignalTimedOut;
  for (int r = 0; r < p.world; ++r) {
    StoreReleaseSys(p.flags[r] + (2 + step) * p.world + p.rank, p.call_tag);  // ordered before the flag
    StoreReleaseSys(p.flags[r] + step * p.world + p.rank, value);
  }
}

// Every block waits until all ranks signalled step `step` of this round. False (in every thread) when one timed
// out or signalled an error; the block then skips its work. An error bit does not cut the wait short: every
// rank's signal of this round must be seen, or a rank could run ahead into the next call and overwrite a tag
// that a slower peer has yet to check. Only a timeout (after which the group is out of step) stops early.
__device__ bool WaitForPeers(const RoundParams& p, int step) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    bool good = true;
    const uint64_t* flags = p.flags[p.rank] + step * p.world;
    const uint64_t want = p.epoch * 4;
    const uint64_t start = GlobalTimerNs();
    for (int r = 0; r < p.world; ++r) {
      uint64_t v;
      bool timed_out = false;
      while ((v = LoadAcquireSys(flags + r)) < want) {
        if (GlobalTimerNs() - start > p.timeout_ns) {
          timed_out = true;
          break;
        }
        __nanosleep(64);
      }
      if (timed_out) {
        atomicOr(&p.status->errors, static_cast<unsigned>(kTimedOut));
        atomicMin(&p.status->peer, r);
        good = false;
        break;
      }
      if (LoadAcquireSys(p.flags[p.rank] + (2 + step) * p.world + r) != p.call_tag) {
        atomicOr(&p.status->errors, static_cast<unsigned>(kMismatch));
        atomicMin(&p.status->peer, r);
        good = false;
      }
      if (v & (kSignalBadData | kSignalTimedOut)) {
        atomicOr(&p.status->errors,
                 static_cast<unsigned>((v & kSignalBadData ? kPeerBadData : 0) | (v & kSignalTimedOut ? kPeerTimedOut : 0)));
        atomicMin(&p.status->reporter, r);
        good = false;
        if (v & kSignalTimedOut) break;  // the group is out of step already: waiting on is pointless
      }
    }
    ok = good ? 1 : 0;
  }
  __syncthreads();
  return ok != 0;
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
  int team_in_warp;
};

__device__ __forceinline__ UnitWalk MakeWalk(const TeamInfo& team) {
  const uint32_t teams_per_warp = 32 / team.size;
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  return UnitWalk{warp * teams_per_warp + (threadIdx.x & 31) / team.size, warps * teams_per_warp, 0};
}

// ---- kernels --------------------------------------------------------------------------------------------

template <typename T, int kBits>
__device__ __forceinline__ void ScatterBody(const T* __restrict__ in, const RoundParams& p) {
  const int group = p.step1.group_size;
  const bool spike = p.step1.spike;
  const TeamInfo team = MakeTeam(group);
  const uint32_t total = TotalUnits(p);
  const UnitWalk walk = MakeWalk(team);
  uint64_t first_bad = ~0ull;
  for (uint32_t u = walk.first; u < total; u += walk.stride) {
    const Unit at = LocateUnit(p, u);
    const Shard shard = ShardOfClass(at.last ? p.last : p.full, at.j);
    const uint64_t full_enc1 = ShardOfClass(p.full, at.j).enc1;
    const uint64_t first = static_cast<uint64_t>(at.g) * group;
    const int valid = ValidIn(shard.size, first, team.t);
    const uint64_t value_index = at.kk * p.chunk_values + shard.begin + first + team.t * kPerThread;
    float v[kPerThread];
    LoadElements(in + value_index, valid, v);
    uint8_t* slot = p.step1_area[at.j] + at.kk * p.world * full_enc1 + p.rank * shard.enc1;
    if constexpr (kBits == 0) {  // raw elements pass through unchecked, as WireCommunicator's memcpy does
      StoreElements(reinterpret_cast<T*>(slot) + first + team.t * kPerThread, valid, v);
    } else {
      bool group_bad = false;
      const Piece<kBits> piece = EncodeGroup<kBits>(spike, v, valid, team, &group_bad);
      if (group_bad) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          if (i < valid && !isfinite(v[i]) && first_bad == ~0ull) first_bad = p.call_offset + value_index + i;
        }
      }
      StorePiece<kBits>(spike, piece, PlaceGroup<kBits>(p.step1.header_bytes, shard.size, shard.groups, at.g), first,
                        team.t, slot);
    }
  }
  if (first_bad != ~0ull) {
    atomicMin(&p.status->first_bad_input, first_bad);
    atomicOr(&p.status->errors, static_cast<unsigned>(kBadInput));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 3) ReduceScatterPushKernel(const T* __restrict__ in,
                                                                    const __grid_constant__ RoundParams p) {
  WithBits(p.step1.bits, [&](auto bits) { ScatterBody<T, decltype(bits)::value>(in, p); });
  ArriveAndSignal(p, 0);
}

// Decodes rank r's step-1 encoding of this unit.
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
    float sum[kPerThread];  // in rank order 0..N-1, as WireCommunicator
    DecodeStep1<T, kBits1, false>(p, slots, shard, g, first, valid, team.t, sum);
    for (int r = 1; r < p.world; ++r) {
      DecodeStep1<T, kBits1, true>(p, slots + r * shard.enc1, shard, g, first, valid, team.t, sum);
    }
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
  if (WaitForPeers(p, 0)) {
    WithBits(p.step1.bits, [&](auto bits) { ReduceBody<T, decltype(bits)::value>(p); });
  }
  ArriveAndSignal(p, 1);
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
  if (!WaitForPeers(p, 1)) return;
  WithBits(p.step2.bits, [&](auto bits) { GatherBody<T, decltype(bits)::value>(out, p); });
}

absl::Status LaunchError(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
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

template <typename T>
absl::Status LaunchTyped(const void* in, void* out, const RoundParams& p, cudaStream_t stream) {
  ReduceScatterPushKernel<T><<<p.sms * ResidentBlocks(ReduceScatterPushKernel<T>), kThreads, 0, stream>>>(
      static_cast<const T*>(in), p);
  if (absl::Status s = LaunchError("AllReduce step-1 kernel"); !s.ok()) return s;
  ReduceGatherPushKernel<T><<<p.sms * ResidentBlocks(ReduceGatherPushKernel<T>), kThreads, 0, stream>>>(p);
  if (absl::Status s = LaunchError("AllReduce reduce kernel"); !s.ok()) return s;
  GatherDecodeKernel<T><<<p.sms * ResidentBlocks(GatherDecodeKernel<T>), kThreads, 0, stream>>>(static_cast<T*>(out),
                                                                                               p);
  return LaunchError("AllReduce step-2 kernel");
}

}  // namespace

size_t ElementBytes(ElementType type) { return type == ElementType::kFloat32 ? 4 : 2; }

uint64_t EncodedBytes(const StepFormat& f, uint64_t values, size_t raw_bytes) {
  if (f.bits == 0) return values * raw_bytes;
  const uint64_t groups = (values + f.group_size - 1) / f.group_size;
  uint64_t bytes = groups * f.header_bytes;
  for (int p = 0; p < f.plane_count; ++p) bytes += PlaneBytes(values, f.plane_width[p]);
  return bytes;
}

ChunkClass MakeChunkClass(uint64_t values, int world, const StepFormat& step1, const StepFormat& step2,
                          ElementType type) {
  const auto align16 = [](uint64_t b) { return (b + 15) / 16 * 16; };
  const size_t raw = ElementBytes(type);
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

absl::Status LaunchAllReduceRound(const void* in, void* out, const RoundParams& p, void* stream) {
  if (p.chunks == 0) return absl::OkStatus();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.type) {
    case ElementType::kFloat32:
      return LaunchTyped<float>(in, out, p, s);
    case ElementType::kBfloat16:
      return LaunchTyped<__nv_bfloat16>(in, out, p, s);
    case ElementType::kFloat16:
      return LaunchTyped<__half>(in, out, p, s);
  }
  return absl::InvalidArgumentError("unknown element type");
}

}  // namespace kvt::collective::internal
