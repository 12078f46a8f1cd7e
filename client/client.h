// kvt::Client: what an inference engine links to talk to the kvtd beside it. Hides gRPC: every call is a
// plain function returning absl::Status with the daemon's canonical code and message, bounded by a deadline.
// Thread-safe (one Client may be shared by the engine's threads).
//
//   KVT_ASSIGN_OR_RETURN(auto client, kvt::Client::Connect({.socket = "/tmp/kvtd-decode.sock"}));
//   KVT_RETURN_IF_ERROR(client->RegisterRegion("kv", layout, shm->name(), shm->size()));
//   KVT_RETURN_IF_ERROR(client->Expect({.request_id = "r1", .region_id = "kv", .block_ids = ids, ...}));
//   KVT_RETURN_IF_ERROR(client->WaitForLayer("r1", 0, kvt::Precision::kAnchor, absl::Seconds(5)));
#ifndef KVT_CLIENT_CLIENT_H_
#define KVT_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/kvt/v1/client.grpc.pb.h"
#include "proto/kvt/v1/layout.pb.h"

namespace kvt {

struct ClientOptions {
  // The daemon's client socket (kvtd --client_socket).
  std::string socket = "/tmp/kvtd.sock";
  // Bound on connecting in Connect.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Deadline of each unary call.
  absl::Duration call_timeout = absl::Seconds(30);
};

// Prefill side: send a request's KV to a decode daemon.
struct OfferSpec {
  std::string request_id;
  std::string region_id;
  std::vector<uint32_t> block_ids;  // in token order
  uint64_t num_tokens = 0;
  std::vector<uint32_t> ready_layers;  // more may follow in later Offers
  std::string scheme = "lynx";
  std::string decode_daemon;  // the decode daemon: its peer service's host:port, or its daemon id (kvtd with etcd)
  absl::Duration deadline = absl::Seconds(60);
};

// Decode side: write a request's KV into these blocks when it arrives.
struct ExpectSpec {
  std::string request_id;
  std::string region_id;
  std::vector<uint32_t> block_ids;
  uint64_t num_tokens = 0;
  std::string source_daemon;  // the prefill daemon's id, or "" for any
  absl::Duration deadline = absl::Seconds(60);
  bool allow_anchor_only = false;
};

enum class Precision { kAnchor, kFull };

class Client {
 public:
  // UNAVAILABLE (saying which socket) if no daemon answers within options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  absl::Status RegisterRegion(const std::string& region_id, const v1::KvLayout& layout, const std::string& shm_name,
                              uint64_t size_bytes);
  // A KV cache in this process's GPU memory: `ipc_handle` from ExportCudaIpcHandle (common/cuda_ipc.h) for the
  // allocation of `size_bytes` on CUDA device `device` (the daemon's ordinal for the same GPU). The daemon maps
  // it and encodes and decodes pages in place with the CUDA kernels; FAILED_PRECONDITION if it has no GPU. The
  // region starts `offset_bytes` into the allocation the handle names (a tensor of a caching allocator).
  absl::Status RegisterGpuRegion(const std::string& region_id, const v1::KvLayout& layout,
                                 const std::string& ipc_handle, uint64_t size_bytes, int device,
                                 uint64_t offset_bytes = 0);
  absl::Status UnregisterRegion(const std::string& region_id);
  absl::Status Offer(const OfferSpec& spec);
  absl::Status Expect(const ExpectSpec& spec);
  absl::Status Cancel(const std::string& request_id);
  absl::StatusOr<v1::StatsResponse> Stats(bool include_requests = false);
  // Where a live or recently finished request's time went on the daemon, stage by stage. NOT_FOUND if unknown.
  absl::StatusOr<v1::ProfileResponse> Profile(const std::string& request_id, v1::Side side = v1::SIDE_UNSPECIFIED);

  // Calls `on_event` for each of the request's events (replayed from the start) until DONE or FAILED. Returns
  // OK after DONE, the transfer's status after FAILED, DEADLINE_EXCEEDED if `timeout` passes first, or the
  // call's error (NOT_FOUND for an unknown request).
  absl::Status Watch(const std::string& request_id, const std::function<void(const v1::TransferEvent&)>& on_event,
                     absl::Duration timeout, v1::Side side = v1::SIDE_UNSPECIFIED);

  // Waits until `layer` of the request is at `precision` in the engine's blocks. OK then; the transfer's status
  // if it failed first; FAILED_PRECONDITION if it finished without reaching that precision (anchor-only);
  // DEADLINE_EXCEEDED after `timeout`.
  absl::Status WaitForLayer(const std::string& request_id, uint32_t layer, Precision precision,
                            absl::Duration timeout);

 private:
  Client(ClientOptions options, std::unique_ptr<v1::KvtClient::Stub> stub)
      : options_(std::move(options)), stub_(std::move(stub)) {}
  void Prepare(grpc::ClientContext* context) const;
  // One unary call with the call deadline; errors carry `name`.
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (v1::KvtClient::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response, const char* name) const;

  const ClientOptions options_;
  const std::unique_ptr<v1::KvtClient::Stub> stub_;
};

}  // namespace kvt

#endif  // KVT_CLIENT_CLIENT_H_
