/* The collectives behind a C ABI (docs/COLLECTIVES.md, "From Python and other engines"), the pattern of vLLM's
 * pynccl: one shared library, libkvt_collective.so, loaded with dlopen/ctypes, taking raw pointers, element
 * counts, a dtype code and the caller's CUDA stream. Python's kvt.collective.Communicator is built on it.
 *
 *   kvt_coll_listener* l; int port;
 *   kvt_coll_listen("127.0.0.1", &l, &port);                  // publish host:port, learn everyone's
 *   kvt_coll_config c = {KVT_COLL_ABI_VERSION}; c.backend = KVT_COLL_CUDA; c.rank = r; c.peers = "h:p,h:p";
 *   c.device = -1;                                             // rank % devices (0 would mean GPU 0)
 *   c.listener = l;                                            // consumed
 *   kvt_coll_comm* comm; if (kvt_coll_create(&c, &comm) != 0) puts(kvt_coll_last_error());
 *   kvt_coll_all_reduce(comm, d_in, d_out, n, KVT_COLL_BF16, &opts, stream);     // enqueued on `stream`
 *   kvt_coll_synchronize(comm, stream, 30000);                 // errors the GPU found come back here
 *   kvt_coll_destroy(comm);
 *
 * Every function returns 0 or an absl/gRPC canonical status code (3 INVALID_ARGUMENT, 4 DEADLINE_EXCEEDED,
 * 9 FAILED_PRECONDITION, 14 UNAVAILABLE, ...) and leaves the message in kvt_coll_last_error() (per thread).
 * A communicator is used by one thread at a time; every rank calls the same collectives in the same order.
 */
#ifndef KVT_COLLECTIVE_C_API_H_
#define KVT_COLLECTIVE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct below changes; kvt_coll_create refuses a config of another version. */
#define KVT_COLL_ABI_VERSION 2u

/* Element types: numerics::DType's order. */
enum { KVT_COLL_F32 = 0, KVT_COLL_BF16 = 1, KVT_COLL_F16 = 2 };

/* Backends. TCP and UCX run on host fp32 buffers (blocking calls); CUDA on device buffers of any element
 * type, the GPUs of one host mapping each other's memory (calls enqueue on the caller's stream). */
enum { KVT_COLL_TCP = 0, KVT_COLL_UCX = 1, KVT_COLL_CUDA = 2 };

typedef struct kvt_coll_listener kvt_coll_listener;
typedef struct kvt_coll_comm kvt_coll_comm;

typedef struct {
  uint32_t abi_version;        /* KVT_COLL_ABI_VERSION */
  int32_t backend;             /* KVT_COLL_TCP, _UCX or _CUDA */
  int32_t rank;                /* this rank: its entry in `peers` */
  const char* peers;           /* "host:port,host:port,...": every rank's bootstrap address, rank order */
  kvt_coll_listener* listener; /* optional: this rank's bound listener (consumed, even on error, once
                                  abi_version matches) */
  uint32_t bootstrap_timeout_ms; /* 0: 30 s */
  const char* ucx_tls;         /* UCX: UCX_TLS ("" or NULL: UCX's choice) */
  const char* ucx_net_devices; /* UCX: UCX_NET_DEVICES ("" or NULL: UCX's choice) */
  int32_t device;              /* CUDA: this rank's device; -1: rank % device count */
  uint64_t workspace_bytes;    /* CUDA: per-rank workspace; 0: 256 MiB (the same on every rank) */
  const char* nccl_library;    /* CUDA: NCCL to route small or unquantized calls to ("" or NULL: never) */
  int64_t one_shot_bytes;      /* CUDA: calls of at most this many bytes take the one-shot round (one kernel;
                                  the result of an unquantized step 2); -1: kvt's default for the world
                                  (kvt_coll_default_one_shot_bytes); 0: never. The same on every rank. */
} kvt_coll_config;

typedef struct {
  int32_t step1_bits;    /* reduce-scatter width: 0 (unquantized) or 2..8 */
  int32_t step2_bits;    /* all-gather width: 0 or 2..8 */
  int32_t group_size;    /* values per quantization group (CUDA: a power of two, 16..256) */
  int32_t spike_reserve; /* nonzero: each group's largest value travels exactly */
  uint64_t chunk_bytes;  /* fp32 bytes per two-step round; 0: 1 MiB */
  uint32_t timeout_ms;   /* how long the call may wait on its peers; 0: 30 s */
} kvt_coll_all_reduce_options;

uint32_t kvt_coll_abi_version(void);
/* The one-shot threshold (bytes) a config's -1 means for `world` ranks with `workspace_bytes` each (0: the
 * default workspace): an estimate of the crossover, lowered to what half of the workspace holds. */
int64_t kvt_coll_default_one_shot_bytes(int32_t world, uint64_t workspace_bytes);
/* The message of this thread's last failed call ("" after a success). Valid until this thread's next call. */
const char* kvt_coll_last_error(void);

/* Binds and listens on host:port 0 (a free port, written to *port). */
int kvt_coll_listen(const char* host, kvt_coll_listener** out, int32_t* port);
void kvt_coll_listener_close(kvt_coll_listener* listener);

/* Collective: every rank calls it with the same backend and peers. */
int kvt_coll_create(const kvt_coll_config* config, kvt_coll_comm** out);
/* Collective too (the CUDA backend says goodbye to its peers before unmapping). NULL is a no-op. */
void kvt_coll_destroy(kvt_coll_comm* comm);

int32_t kvt_coll_rank(const kvt_coll_comm* comm);
int32_t kvt_coll_world_size(const kvt_coll_comm* comm);
int32_t kvt_coll_device(const kvt_coll_comm* comm); /* -1 for host backends */

/* out[i] = sum over ranks of in[i]; `out` may be `in`. Host backends: host fp32 buffers, blocking, `stream`
 * ignored. CUDA: device buffers of `count` elements of `dtype` on this rank's device, enqueued on `stream`
 * (a cudaStream_t; NULL is the legacy default stream, as with NCCL: PyTorch's default stream is NULL);
 * errors found on the GPU come back from kvt_coll_synchronize. */
int kvt_coll_all_reduce(kvt_coll_comm* comm, const void* in, void* out, uint64_t count, int32_t dtype,
                        const kvt_coll_all_reduce_options* options, void* stream);

/* CUDA: waits for `stream` (NULL: the legacy default stream) up to timeout_ms (0: 30 s) and reports what the
 * GPU found since the last call. Host backends: 0. */
int kvt_coll_synchronize(kvt_coll_comm* comm, void* stream, uint32_t timeout_ms);

/* ---- MoE Dispatch / Combine (docs/COLLECTIVES.md, "MoE Dispatch and Combine") ------------------------------
 *
 *   kvt_coll_moe_shape shape = {7168, 8, 256};              // hidden, topk, num_experts; the rest: defaults
 *   kvt_coll_moe* moe; kvt_coll_moe_create(&c, &shape, &moe);         // c as for kvt_coll_create
 *   kvt_coll_moe_result d; kvt_coll_moe_dispatch(moe, tokens, experts, weights, n, 0, stream, &d);
 *   ... experts read d.rows / d.slot_expert / d.slot_weight and write expert_out ...
 *   kvt_coll_moe_combine(moe, &d, expert_out, out, 0, stream);
 *   kvt_coll_moe_synchronize(moe, stream, 30000);         // CUDA: what the GPU found
 *
 * Experts are split evenly over the ranks; each token goes once to every rank holding one of its top-k experts;
 * Combine returns, per token, the weighted sum of its experts' outputs (fp32 sums in a fixed order). */
typedef struct kvt_coll_moe kvt_coll_moe;

enum { KVT_COLL_MOE_NONE = 0, KVT_COLL_MOE_FP8 = 1, KVT_COLL_MOE_INT = 2 };

typedef struct {
  int32_t hidden;        /* token width (CUDA: a multiple of 16) */
  int32_t topk;          /* slots per token (CUDA: 1..32) */
  int32_t num_experts;   /* a multiple of the world size */
  int32_t quant;         /* KVT_COLL_MOE_FP8 (0 is KVT_COLL_MOE_NONE: unquantized), _INT (host backends) */
  int32_t bits;          /* KVT_COLL_MOE_INT: 2..8; 0: 8 */
  int32_t group_size;    /* values per quantization group; 0: 128 */
  int32_t spike_reserve; /* KVT_COLL_MOE_INT: nonzero keeps each group's largest value exact */
  int32_t max_tokens;    /* CUDA: tokens a rank may pass to one dispatch (buffers are sized for it); 0: 128 */
  int32_t dtype;         /* CUDA: element type of tokens, rows, expert outputs and the combined output */
} kvt_coll_moe_shape;

/* What one rank received, valid until the second dispatch after it. Host backends (fp32, host memory): rows
 * [num_rows][hidden] in rank-major order (rank_offsets[r]..rank_offsets[r + 1] came from rank r), each row's
 * source rank and index, its slots slot_offsets[row]..slot_offsets[row + 1] (local expert id, weight), and
 * expert outputs come one per slot: [num_slots][hidden]. CUDA (device memory, `dtype`): a fixed stride, rows
 * r * max_tokens + i for i < counts[r] from rank r, slots [num_rows][topk] (-1 and 0 where the expert is
 * elsewhere), expert outputs [num_rows][topk][hidden]; source_rank, slot_offsets and rank_offsets are NULL. */
typedef struct {
  uint64_t sequence;
  int64_t num_rows;
  int64_t num_slots;
  const void* rows;
  const int32_t* source_rank;
  const int32_t* source_index;
  const uint64_t* slot_offsets;
  const int32_t* slot_expert;
  const float* slot_weight;
  const uint64_t* rank_offsets;
  const int32_t* counts;
  int32_t max_tokens;
  int32_t num_tokens; /* tokens this rank dispatched: the combined output's rows */
} kvt_coll_moe_result;

/* Collective, as kvt_coll_create (same config; its CUDA-AllReduce fields are ignored) with the same shape on
 * every rank. */
int kvt_coll_moe_create(const kvt_coll_config* config, const kvt_coll_moe_shape* shape, kvt_coll_moe** out);
void kvt_coll_moe_destroy(kvt_coll_moe* moe);

/* tokens [num_tokens][hidden] (host: fp32; CUDA: `dtype` on the device), topk_experts / topk_weights
 * [num_tokens][topk] (int32 ids in [0, num_experts) or -1; fp32). Host backends block and fill *out; CUDA
 * enqueues on `stream` and fills *out with where the result will be (errors from kvt_coll_moe_synchronize). */
int kvt_coll_moe_dispatch(kvt_coll_moe* moe, const void* tokens, const int32_t* topk_experts,
                          const float* topk_weights, int32_t num_tokens, uint32_t timeout_ms, void* stream,
                          kvt_coll_moe_result* out);
/* expert_out as kvt_coll_moe_result says; out [num_tokens of the dispatch][hidden]. */
int kvt_coll_moe_combine(kvt_coll_moe* moe, const kvt_coll_moe_result* dispatched, const void* expert_out,
                         void* out, uint32_t timeout_ms, void* stream);
int kvt_coll_moe_synchronize(kvt_coll_moe* moe, void* stream, uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* KVT_COLLECTIVE_C_API_H_ */
