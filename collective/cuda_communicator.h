// The CUDA peer-memory backend of the collective module (docs/COLLECTIVES.md): the GPUs of one host, one
// process per GPU, run the two-step AllReduce with their kernels storing straight into each other's memory
// through CUDA IPC (NVLink or PCIe peer access), with no copy through the host and no message layer.
//
// Each rank allocates one workspace on its GPU (flags, then the step-1 and step-2 areas) and exports its IPC
// handle; the ranks swap handles over a bootstrap CollectiveWire (TcpWire between processes) and map each
// other's workspaces. An AllReduce is then three kernels per round on one stream (cuda_all_reduce_kernels.h):
// encode and push shard j to rank j, reduce the own shard and push its encoding to every rank, decode
// everything. The bytes are GroupQuantizer's (quantizer.h), so the result is bitwise WireCommunicator's on the
// same fp32 values (for bf16 and fp16: that result rounded to the type), and bitwise the same on every rank.
//
//   KVT_ASSIGN_OR_RETURN(auto tcp, TcpWire::Create({.rank = rank, .peers = peers}));
//   KVT_ASSIGN_OR_RETURN(auto comm, CudaCommunicator::Create(std::move(tcp), {.device = rank}));
//   KVT_RETURN_IF_ERROR(comm->AllReduceAsync(d_in, d_out, n, DataType::kBfloat16,
//                                            {.step1_bits = 4, .step2_bits = 4}, stream));
//   KVT_RETURN_IF_ERROR(comm->Synchronize(stream, absl::Now() + absl::Seconds(30)));
//
// With `nccl_library` set, the communicator also loads NCCL (dlopen; nothing links it) and hands it the calls
// where its own kernels lose (nccl_routing.h: unquantized calls, and quantized calls under 16 MiB, by default).
// Those calls are NCCL's bf16/fp16/fp32 ring sum: bitwise the same on every rank, but not WireCommunicator's
// bytes, and, like NCCL, they sum a NaN or Inf into the output instead of reporting it (set
// nccl_routing.check_finite for a check of the output that Synchronize reports on every rank).
//
// Contract: every rank calls the same collectives in the same order with the same count, type and options,
// and successive calls are ordered on the GPU (one stream, or the caller orders them). A rank that disagrees is
// detected by a per-call tag (FAILED_PRECONDITION on every rank that sees it); stores are bounds-checked
// against the peer's workspace, so a disagreeing rank garbles results but never writes outside it. Every wait
// on the GPU gives up after options.timeout (DEADLINE_EXCEEDED), so a dead peer cannot hang a stream.
//
// Threading: one thread at a time calls a CudaCommunicator.
#ifndef KVT_COLLECTIVE_CUDA_COMMUNICATOR_H_
#define KVT_COLLECTIVE_CUDA_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collective/collective_wire.h"
#include "collective/communicator.h"
#include "collective/data_type.h"
#include "collective/nccl_routing.h"

namespace kvt {
class DeviceBuffer;
}  // namespace kvt

namespace kvt::collective::internal {
class CudaPeerGroup;
}  // namespace kvt::collective::internal

namespace kvt::collective {

class NcclComm;
class NcclLibrary;

struct CudaCommunicatorOptions {
  // This rank's CUDA device; -1 picks rank % device count.
  int device = -1;
  // Bytes of each rank's step-1 plus step-2 areas (the same on every rank). A call whose encodings do not fit
  // runs in several rounds of whole chunks; one chunk must fit. Default 256 MiB.
  size_t workspace_bytes = size_t{256} << 20;
  // Deadline of the handle exchange at Create and of the goodbye at destruction.
  absl::Duration bootstrap_timeout = absl::Seconds(30);
  // NCCL to hand calls to: a path, or a soname the loader searches ("libnccl.so.2"); empty: never. Every rank
  // must set it alike. NCCL's own initialization (ncclCommInitRank) has no deadline: Create agrees first, over
  // the bootstrap wire and within bootstrap_timeout, that every rank loaded it.
  std::string nccl_library;
  // Which calls go to NCCL when it is loaded.
  NcclRouting nccl_routing;
  // Launch each round's kernels early, as programmatic dependents: their blocks start while the stream's
  // previous kernel's last blocks finish; the first then waits for that kernel to end, the second and third
  // wait on the peers' signals. false: plain launches, each after the previous kernel has drained. Results are
  // the same bytes either way.
  bool early_launch = true;
  // Calls of at most this many input bytes (count x element size) run the one-shot round: one kernel, every rank
  // pushing its step-1 encodings to every rank (cuda_all_reduce_kernels.h). Its result is that of step2_bits = 0
  // whatever the call's step2_bits (there is no second step to quantize), so it is not WireCommunicator's bytes
  // for a call with a quantized step 2; it is bitwise the same on every rank. Reserves 2 x world x (this + 64
  // KiB) bytes at the end of the workspace (INVALID_ARGUMENT if that is more than half of it). 0: never (every
  // call is the two-step round).
  // Every rank must set it alike: Create checks (FAILED_PRECONDITION on every rank), and the call tag also says
  // which path a call took.
  size_t one_shot_bytes = 0;
};

class CudaCommunicator : public Communicator {
 public:
  // Collective: every rank of `bootstrap`'s group calls it. INVALID_ARGUMENT for bad options or a world of
  // more than 16; FAILED_PRECONDITION without a usable GPU, when ranks disagree on workspace_bytes, one_shot_bytes
  // or using NCCL, when a peer's memory cannot be mapped (another host), or when some rank cannot load nccl_library (on
  // every rank, naming it); the wire's error when a peer does not answer.
  static absl::StatusOr<std::unique_ptr<CudaCommunicator>> Create(std::unique_ptr<CollectiveWire> bootstrap,
                                                                  const CudaCommunicatorOptions& options);
  // Waits (bounded) for the stream, says goodbye to the peers so none still writes here, unmaps and frees.
  ~CudaCommunicator() override;
  CudaCommunicator(const CudaCommunicator&) = delete;
  CudaCommunicator& operator=(const CudaCommunicator&) = delete;

  int rank() const override;
  int world_size() const override;
  int device() const;

  // The path a call of this shape takes (the same on every rank), and whether NCCL is loaded ("2.28.9").
  AllReducePath PathOf(size_t count, DataType type, const AllReduceOptions& options) const;
  bool nccl_loaded() const { return nccl_comm_ != nullptr; }
  std::string nccl_version() const;
  // Changes the routing for later calls; every rank must make the same change at the same point.
  void set_nccl_routing(const NcclRouting& routing) { routing_ = routing; }
  // CudaCommunicatorOptions::early_launch for later calls (a local choice: ranks may differ).
  void set_early_launch(bool early) { early_launch_ = early; }

  // Host fp32 buffers: copies `in` to the GPU, runs AllReduceAsync on this communicator's stream, copies the
  // result back and waits (Synchronize with options.timeout plus 10 s). Errors as Communicator::AllReduce.
  absl::Status AllReduce(absl::Span<const float> in, absl::Span<float> out,
                         const AllReduceOptions& options) override;

  // Device buffers of `count` values of `type` on this rank's GPU; `out` may be `in`. Enqueues the kernels on
  // `stream` (a cudaStream_t; null: this communicator's own, a non-blocking stream that does not wait for the
  // legacy default stream: order your copies before the call) and returns; what the GPU finds (bad input,
  // a peer's error, a timeout, a disagreeing rank) comes back from the next Synchronize. INVALID_ARGUMENT here
  // for bad options (group_size must be a power of two from 16 to 256) or null buffers. A call routed to NCCL
  // reports NCCL's launch errors here as INTERNAL; it cannot detect a rank that disagrees on the call (NCCL
  // would wait for it: Synchronize's deadline still holds).
  absl::Status AllReduceAsync(const void* in, void* out, size_t count, DataType type,
                              const AllReduceOptions& options, void* stream = nullptr);

  // Waits for `stream` (null: this communicator's own) until `deadline`, then reports and clears the errors
  // the GPU recorded since the last Synchronize: INVALID_ARGUMENT (a non-finite input or reduced sum, here or
  // on a peer), DEADLINE_EXCEEDED (a peer did not signal in time, or the stream did not finish by
  // `deadline`), FAILED_PRECONDITION (ranks disagree on the call). After an error the group is out of step:
  // make a new one.
  absl::Status Synchronize(void* stream, absl::Time deadline);

  // This communicator's stream (a cudaStream_t).
  void* stream() const;

 private:
  CudaCommunicator() = default;
  // Loads NCCL where asked, checks that every rank agrees and loaded it, and joins the NCCL group.
  absl::Status SetUpNccl(const CudaCommunicatorOptions& options);
  // Checks, over the bootstrap wire, that every rank has the same one_shot_bytes (FAILED_PRECONDITION if not).
  absl::Status AgreeOnOneShot(const CudaCommunicatorOptions& options);
  absl::Status NcclAllReduce(const void* in, void* out, size_t count, DataType type, void* stream);

  // The round counter the kernels keep (internal::RoundState): the epochs live on the GPU, so a call captured
  // in a CUDA graph signals with a new one on every replay. Declared before group_, so freed after the group
  // has drained its stream and said goodbye. (A graph holding a call must not be replayed once the
  // communicator is destroyed.)
  std::unique_ptr<DeviceBuffer> round_state_;
  std::unique_ptr<internal::CudaPeerGroup> group_;  // flags, then the step-1 and step-2 areas
  std::unique_ptr<DeviceBuffer> staging_;  // for the host AllReduce
  uint64_t calls_ = 0;
  absl::Duration timeout_ = absl::Seconds(30);  // of the last call, for messages
  NcclRouting routing_;
  bool early_launch_ = true;
  size_t one_shot_bytes_ = 0;
  uint64_t one_shot_half_ = 0;  // bytes of each half of the one-shot region, at the end of every rank's area
  // Destroyed before group_ (declared after it): an aborted NCCL kernel must not hold the stream the group drains.
  std::unique_ptr<NcclLibrary> nccl_library_;
  std::unique_ptr<NcclComm> nccl_comm_;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_CUDA_COMMUNICATOR_H_
