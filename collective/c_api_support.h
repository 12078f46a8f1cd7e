// What the C ABI's translation units share (c_api.cc: the AllReduce; c_api_moe.cc: Dispatch/Combine): status
// codes at the boundary with the message kept per thread, the config's checks, and the bootstrap wire every
// backend starts from. Not API: use c_api.h.
#ifndef KVT_COLLECTIVE_C_API_SUPPORT_H_
#define KVT_COLLECTIVE_C_API_SUPPORT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/c_api.h"
#include "collective/collective_wire.h"
#include "collective/tcp_wire.h"

struct kvt_coll_listener {
  kvt::collective::TcpListener listener;
};

namespace kvt::collective::c_api {

// Keeps the message for kvt_coll_last_error and returns the code.
int Fail(const absl::Status& status);
// 0 (and clears the message) or Fail.
int Done(const absl::Status& status);
const char* LastError();

absl::Duration MsOr(uint32_t ms, absl::Duration fallback);
std::string StringOr(const char* s);
// cudaStreamLegacy for NULL (the C ABI's NULL stream is the legacy default stream, as with NCCL).
void* StreamOrDefault(void* stream);

// Checks the config's version, backend, peers and rank.
absl::Status CheckConfig(const kvt_coll_config& c);
// The TCP mesh every backend starts from (the host backends' wire; for UCX and CUDA, their bootstrap).
absl::StatusOr<std::unique_ptr<TcpWire>> BootstrapWire(const kvt_coll_config& c,
                                                       std::unique_ptr<kvt_coll_listener> listener);
// The wire a host backend runs on: the TCP mesh itself, or UCX bootstrapped over it.
absl::StatusOr<std::unique_ptr<CollectiveWire>> HostWire(const kvt_coll_config& c, std::unique_ptr<TcpWire> tcp);

}  // namespace kvt::collective::c_api

#endif  // KVT_COLLECTIVE_C_API_SUPPORT_H_
