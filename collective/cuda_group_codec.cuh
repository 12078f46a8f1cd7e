// One quantization group's codec on the GPU, for the collective kernels (cuda_all_reduce_kernels.cu): element
// loads and stores, GroupQuantizer's plane layout at compile time, and the team-cooperative encode and decode of
// a group. A group of G values (a power of two, 16..256) is handled by a team of G / 16 threads, kPerThread = 16
// consecutive values per thread, so every thread owns whole bytes of every plane (16 values x w bits = 2w bytes).
// The arithmetic is GroupQuantizer's (quantizer.cc) operation for operation, in fp32 with one rounding each, so
// the bytes are the CPU reference's. Device code only (plus PlaneBytes/PlaneCountOf/PlaneWidthOf on the host);
// include it in one .cu file.
#ifndef KVT_COLLECTIVE_CUDA_GROUP_CODEC_CUH_
#define KVT_COLLECTIVE_CUDA_GROUP_CODEC_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

namespace kvt::collective::internal {

// Values per thread: whole bytes of every plane, and the per-group work spread over 16 values.
constexpr int kPerThread = 16;

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

}  // namespace kvt::collective::internal

#endif  // KVT_COLLECTIVE_CUDA_GROUP_CODEC_CUH_
