// NCCL loaded at run time (dlopen): CudaCommunicator hands it the calls it routes to NCCL (nccl_routing.h), and
// the benchmarks compare kvt's collectives with it on machines that have it; nothing in kvt links NCCL. Declares only the stable C ABI it uses (NCCL 2.x): unique ids, ranks,
// AllReduce, grouped Send/Recv. Every NCCL error becomes a Status naming the call.
//
//   KVT_ASSIGN_OR_RETURN(auto nccl, NcclLibrary::Load("/usr/lib/x86_64-linux-gnu/libnccl.so.2"));
//   KVT_ASSIGN_OR_RETURN(NcclId id, nccl->NewId());                       // on rank 0, sent to the others
//   KVT_ASSIGN_OR_RETURN(auto comm, nccl->InitRank(world, id, rank));
//   KVT_RETURN_IF_ERROR(comm->AllReduce(in, out, count, NcclType::kBfloat16, stream));
//
// Thread-compatible.
#ifndef KVT_COLLECTIVE_NCCL_LIBRARY_H_
#define KVT_COLLECTIVE_NCCL_LIBRARY_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective_wire.h"

namespace kvt::collective {

// ncclUniqueId: 128 opaque bytes.
struct NcclId {
  char bytes[128];
};

// ncclDataType_t values.
enum class NcclType : int { kUint8 = 1, kFloat16 = 6, kFloat32 = 7, kBfloat16 = 9 };

class NcclLibrary;

// One ncclComm_t; destroyed with the object.
class NcclComm {
 public:
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Destroy with ncclCommAbort rather than ncclCommDestroy: for a communicator whose kernels may be stuck on a
  // dead peer (ncclCommDestroy would wait for them).
  void AbortOnDestroy() { abort_ = true; }

  // Sum AllReduce of `count` elements on `stream` (a cudaStream_t).
  absl::Status AllReduce(const void* in, void* out, size_t count, NcclType type, void* stream);
  // All-to-all of `count_per_peer` elements per rank: block r of `in` goes to rank r, block r of `out` comes
  // from rank r (grouped ncclSend/ncclRecv).
  absl::Status AllToAll(const void* in, void* out, size_t count_per_peer, NcclType type, int world, void* stream);

 private:
  friend class NcclLibrary;
  NcclComm(const NcclLibrary* lib, void* comm) : lib_(lib), comm_(comm) {}
  const NcclLibrary* lib_;
  void* comm_;
  bool abort_ = false;
};

class NcclLibrary {
 public:
  // NOT_FOUND when `path` cannot be loaded or lacks a symbol.
  static absl::StatusOr<std::unique_ptr<NcclLibrary>> Load(const std::string& path);
  ~NcclLibrary();

  // "2.28.3".
  std::string Version() const;
  absl::StatusOr<NcclId> NewId() const;
  // Collective over the `world` ranks that share `id`; uses the current CUDA device.
  absl::StatusOr<std::unique_ptr<NcclComm>> InitRank(int world, const NcclId& id, int rank) const;
  // Collective over `wire`'s group: rank 0 makes the id and sends it to the others over the wire.
  absl::StatusOr<std::unique_ptr<NcclComm>> InitOverWire(CollectiveWire& wire, absl::Time deadline) const;

 private:
  friend class NcclComm;
  NcclLibrary() = default;
  absl::Status Check(int result, const char* what) const;

  void* handle_ = nullptr;
  int (*get_version_)(int*) = nullptr;
  int (*get_unique_id_)(NcclId*) = nullptr;
  int (*comm_init_rank_)(void**, int, NcclId, int) = nullptr;
  int (*comm_destroy_)(void*) = nullptr;
  int (*comm_abort_)(void*) = nullptr;
  int (*all_reduce_)(const void*, void*, size_t, int, int, void*, void*) = nullptr;
  int (*send_)(const void*, size_t, int, int, void*, void*) = nullptr;
  int (*recv_)(void*, size_t, int, int, void*, void*) = nullptr;
  int (*group_start_)() = nullptr;
  int (*group_end_)() = nullptr;
  const char* (*error_string_)(int) = nullptr;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_NCCL_LIBRARY_H_
