// The launch interface of the CUDA two-step AllReduce (cuda_all_reduce_kernels.cu), plain C++ for
// cuda_communicator.cc. Not API: use cuda_communicator.h.
//
// One round of an AllReduce is three kernels on one stream, each over every chunk of the round at once:
//   1. ReduceScatterPush: rank `me` encodes shard j of every chunk with the step-1 format and stores it straight
//      into rank j's step-1 area (peer memory through CUDA IPC), slot [chunk][me]; then signals every rank.
//   2. ReduceGatherPush: waits for every rank's step-1 signal, decodes the N encodings of its own shard, sums
//      them in fp32 in rank order 0..N-1, encodes the sum with the step-2 format and stores it into every rank's
//      step-2 area, slot [chunk][me]; then signals every rank.
//   3. GatherDecode: waits for every rank's step-2 signal and decodes all shards into the output.
// The bytes in each slot are exactly GroupQuantizer's packed layout (quantizer.h) of that shard (or the raw
// elements when a step is unquantized), so the result is bitwise that of WireCommunicator over fp32. Signals
// are 64-bit flags in each rank's workspace: value = epoch * 4 + error bits, written with a system-scope release
// after a system-scope fence; waits poll with acquire loads and give up after `timeout_ns` (globaltimer), so a
// dead peer cannot hang a stream forever.
//
// Thread-safe (no host state).
#ifndef KVT_COLLECTIVE_CUDA_ALL_REDUCE_KERNELS_H_
#define KVT_COLLECTIVE_CUDA_ALL_REDUCE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "collective/cuda_peer_signals.h"
#include "collective/data_type.h"

namespace kvt::collective::internal {

// How one step's shards are encoded. The planes follow from `bits` (GroupQuantizer's PlaneWidths); the kernels
// lay them out at compile time.
struct StepFormat {
  int bits = 0;  // 0: raw elements (step 1: the input type; step 2: the output type); else 2..8
  int group_size = 128;
  bool spike = false;
  int header_bytes = 0;  // 0 (raw), 8, or 16 with spikes
};

// A chunk's shard geometry and encoded sizes. All chunks of a round but the last are identical.
struct ChunkClass {
  uint64_t values = 0;  // in the chunk
  uint64_t base = 0;    // shard size of ranks >= extra; ranks < extra hold base + 1
  int extra = 0;
  uint64_t groups_big = 0, groups_small = 0;  // groups in a shard of base + 1 / base values
  uint64_t units_all = 0;                     // groups over all shards of the chunk
  // Encoded shard sizes rounded up to 16 bytes (every slot starts 16-aligned).
  uint64_t enc1_big = 0, enc1_small = 0, enc2_big = 0, enc2_small = 0;
};

// Everything one round's kernels need, passed by value.
// The round counter of one communicator, in its own device memory, so that a call captured in a CUDA graph
// takes a new epoch on every replay: each kernel of a round reads epoch + 1 when it starts (the first after the
// previous round's last kernel has finished, the others launched after that), and the round's last kernel
// stores it once all its blocks have arrived. Zero at creation.
struct RoundState {
  unsigned long long epoch;
  unsigned int last_kernel_arrivals;
  unsigned int unused;
};

struct RoundParams {
  DataType type = DataType::kFloat32;
  int world = 1, rank = 0;
  uint64_t chunk_values = 0;  // C, values per chunk
  uint64_t chunks = 0;        // chunks in this round; the last may be short (`last`)
  uint64_t call_offset = 0;   // index of the round's first value in the call (for error indices)
  ChunkClass full, last;
  StepFormat step1, step2;
  // Per rank: its step-1 and step-2 areas, and its flags (FlagWords(world) u64: step-1 flags, step-2 flags,
  // then the call tags that came with them, then the one-shot round's flags and tags for each epoch parity; one
  // word per source rank each), as mapped in this process (this rank's own are local pointers).
  uint8_t* step1_area[kMaxCudaWorld] = {};
  uint8_t* step2_area[kMaxCudaWorld] = {};
  uint64_t* flags[kMaxCudaWorld] = {};
  RoundState* state = nullptr;  // the round counter (device memory); flags hold epoch * 4 + bits once signalled
  uint64_t call_tag = 0;  // a hash of the call (number, count, type, options), sent with every signal
  uint64_t timeout_ns = 0;
  DeviceStatus* status = nullptr;  // this rank's, device memory
  int sms = 0;                     // multiprocessors of the device (each grid fills them once)
  // The one-shot path only (LaunchOneShotAllReduce): every rank's one-shot region as mapped here, two halves of
  // `one_shot_half` bytes each; a round uses half (epoch % 2).
  uint8_t* one_shot_area[kMaxCudaWorld] = {};
  uint64_t one_shot_half = 0;
};

// The three kernels of a round, enqueued on `stream` (a cudaStream_t). `in` and `out` point at the round's
// first value (they may be the same buffer). With `early_launch`, each kernel is a programmatic dependent of the
// stream's kernel before it (Hopper): its blocks start as the previous grid's blocks finish, instead of after
// the whole grid has drained and a new launch has been scheduled. That is safe because the second and third wait
// on the signals, not on stream order, and the first waits for the previous kernel to finish
// (griddepcontrol.wait) before it reads or stores anything. Launch errors come back as INTERNAL.
absl::Status LaunchAllReduceRound(const void* in, void* out, const RoundParams& params, bool early_launch,
                                  void* stream);

// The one-shot AllReduce of small calls: one kernel per round instead of three, and one exchange instead of two.
// Each rank encodes every shard of every chunk with the step-1 format, exactly as step 1 of the two-step round
// does, but stores each encoding into every rank's one-shot region (slot [chunk][shard][source rank]) and
// signals; then every rank decodes all N encodings of every shard, sums them in fp32 in rank order 0..N-1 and
// stores the sum in the output type. That is bitwise the two-step round with step2.bits = 0 (the same groups,
// the same decodes, the same order of additions, one rounding to the output type), whatever `step2` says: a
// one-shot round has no second step to quantize. Each rank sends (N - 1) x its encoded input instead of
// 2 (N - 1) / N x, so it is for calls where a round's fixed costs (launches, two waits) outweigh the bytes.
// Reusing a half is safe: a rank writes half h again two rounds later, after every rank signalled the round in
// between, which each did only after it had finished reading half h. The regions must not overlap the step areas
// (a two-step round's peers may still be reading those while a one-shot round writes).
// The kernel is launched cooperatively (all blocks resident at once, whatever else shares the device), at most
// one block an SM, never early.
absl::Status LaunchOneShotAllReduce(const void* in, void* out, const RoundParams& params, void* stream);

// One-shot region bytes (one half) a round of `chunks` chunks of class `full` needs.
uint64_t OneShotHalfBytes(const ChunkClass& full, int world, uint64_t chunks);

// Records the smallest index of a non-finite value of out[0, count) in `status` as kBadSum (for calls NCCL ran).
// One read of the output (16-byte loads when `out` is 16-byte aligned).
absl::Status LaunchFindNonFinite(const void* out, uint64_t count, DataType type, int sms, DeviceStatus* status,
                                 void* stream);

// Step-1 / step-2 area bytes one rank needs for a round of `chunks` chunks of class `full` (a short last chunk
// never needs more).
uint64_t Step1AreaBytes(const ChunkClass& full, int world, int rank, uint64_t chunks);
uint64_t Step2AreaBytes(const ChunkClass& full, int world, uint64_t chunks);

// u64 words of a rank's flag area: the two steps' flags and tags, then the one-shot round's flags and tags for
// each epoch parity (cuda_all_reduce_kernels.cu OneShotSignal).
inline constexpr size_t FlagWords(int world) { return 8 * static_cast<size_t>(world); }

// Fills `c` for a chunk of `values` values (formats and world given).
ChunkClass MakeChunkClass(uint64_t values, int world, const StepFormat& step1, const StepFormat& step2,
                          DataType type);

// Bytes of one shard of `values` values in `format`, unpadded (GroupQuantizer::PackedSize, or raw elements of
// `raw_bytes` each).
uint64_t EncodedBytes(const StepFormat& format, uint64_t values, size_t raw_bytes);

}  // namespace kvt::collective::internal

#endif  // KVT_COLLECTIVE_CUDA_ALL_REDUCE_KERNELS_H_
