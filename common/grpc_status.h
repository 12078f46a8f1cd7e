// absl::Status <-> grpc::Status, one-to-one on canonical codes (docs/ARCHITECTURE.md: converted once, at the service
// edge and in the client library).
#ifndef KVT_COMMON_GRPC_STATUS_H_
#define KVT_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kvt {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kvt

#endif  // KVT_COMMON_GRPC_STATUS_H_
