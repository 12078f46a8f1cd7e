// The GPUs of one host as a group of ranks (one process per GPU) that see each other's memory: each rank
// allocates one workspace on its GPU (a zeroed flag area, then `area_bytes` for the collective's data), exports
// it through CUDA IPC, swaps handles with every peer over a bootstrap CollectiveWire and maps theirs. The
// collectives of the CUDA backend (CudaCommunicator's AllReduce, CudaExpertAllToAll's Dispatch/Combine) are
// built on it: their kernels store straight into the peers' workspaces and signal through the flag areas
// (cuda_peer_signals.h). It also owns the rank's stream and device status, and turns that status into a Status
// once a stream has finished.
//
// Threading: one thread at a time. Not API: used by the CUDA collectives.
#ifndef KVT_COLLECTIVE_CUDA_PEER_GROUP_H_
#define KVT_COLLECTIVE_CUDA_PEER_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cuda_ipc.h"
#include "collective/collective_wire.h"
#include "collective/cuda_peer_signals.h"

namespace kvt {
class DeviceBuffer;
class OwnedCudaStream;
}  // namespace kvt

namespace kvt::collective::internal {

struct CudaPeerGroupOptions {
  // This rank's CUDA device; -1 picks rank % device count.
  int device = -1;
  // Bytes of the flag area at the start of the workspace (zeroed), a multiple of 256.
  size_t flag_bytes = 4096;
  // Bytes after it; every rank must pass the same.
  size_t area_bytes = 0;
  // Deadline of the handle exchange at Create and of the goodbye at destruction.
  absl::Duration bootstrap_timeout = absl::Seconds(30);
  // Names the collective in messages ("CudaCommunicator").
  std::string what = "CUDA collective";
};

class CudaPeerGroup {
 public:
  // Collective: every rank of `bootstrap`'s group calls it with the same sizes. INVALID_ARGUMENT for a world of
  // more than kMaxCudaWorld; FAILED_PRECONDITION without a usable GPU, when ranks disagree on the sizes, or when a
  // peer's memory cannot be mapped (another host); the wire's error when a peer does not answer.
  static absl::StatusOr<std::unique_ptr<CudaPeerGroup>> Create(std::unique_ptr<CollectiveWire> bootstrap,
                                                               const CudaPeerGroupOptions& options);
  // Waits (bounded by `drain`) for the stream, says goodbye to the peers so none still writes here, unmaps and
  // frees.
  ~CudaPeerGroup();
  CudaPeerGroup(const CudaPeerGroup&) = delete;
  CudaPeerGroup& operator=(const CudaPeerGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int device() const { return device_; }
  int sm_count() const { return sm_count_; }
  size_t area_bytes() const { return area_bytes_; }

  // Rank r's flag area (u64 words) and data area, as mapped in this process (this rank's own are local).
  uint64_t* flags(int r) const { return reinterpret_cast<uint64_t*>(bases_[r]); }
  uint8_t* area(int r) const { return bases_[r] + flag_bytes_; }
  DeviceStatus* status() const;
  // This rank's stream (a cudaStream_t); `stream` when not null.
  void* StreamOr(void* stream) const;

  // The bootstrap wire, for collectives that set up more over it (NCCL's id); the group says goodbye over it.
  CollectiveWire& wire() const { return *bootstrap_; }

  // Makes this rank's device current for the calling thread.
  absl::Status UseDevice() const;

  // Waits for `stream` (null: this group's own) until `deadline` and returns the device status recorded since
  // the last call, cleared (DEADLINE_EXCEEDED when the stream does not finish in time: the group is then out of
  // step). `drain` bounds the wait at destruction.
  absl::StatusOr<DeviceStatus> Finish(void* stream, absl::Time deadline);
  void set_drain(absl::Duration drain) { drain_ = drain; }

 private:
  CudaPeerGroup() = default;
  absl::Status Bootstrap(const CudaPeerGroupOptions& options);

  std::unique_ptr<CollectiveWire> bootstrap_;
  std::string what_;
  int rank_ = 0;
  int world_ = 1;
  int device_ = 0;
  int sm_count_ = 0;
  size_t flag_bytes_ = 0;
  size_t area_bytes_ = 0;
  absl::Duration drain_ = absl::Seconds(40);
  std::unique_ptr<OwnedCudaStream> own_stream_;
  std::unique_ptr<DeviceBuffer> workspace_;  // flags, then the area; exported
  std::unique_ptr<DeviceBuffer> status_;     // DeviceStatus
  std::vector<std::unique_ptr<IpcMapping>> peers_;      // by rank; null for this rank
  std::vector<uint8_t*> bases_;                         // every rank's workspace as mapped here
};

// The Status of a finished call from its device status: OK without errors; INVALID_ARGUMENT for a non-finite
// input or sum, or bad routing, here or reported by a peer; FAILED_PRECONDITION when ranks disagree on the call;
// DEADLINE_EXCEEDED when a peer stayed silent past `timeout`. `call` names it ("AllReduce", "Dispatch").
absl::Status DeviceStatusToStatus(const DeviceStatus& got, int rank, const std::string& call,
                                  absl::Duration timeout);

}  // namespace kvt::collective::internal

#endif  // KVT_COLLECTIVE_CUDA_PEER_GROUP_H_
