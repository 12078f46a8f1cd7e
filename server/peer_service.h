// The KvtPeer gRPC service (proto/kvt/v1/peer.proto): what other daemons call. Every call is authenticated
// (PeerSecurity: token; mutual TLS is enforced by the port's credentials) before any field is read; fields are
// validated here, then handed to the decode side (OpenTransfer) or both sides (CancelTransfer). Thread-safe.
#ifndef KVT_SERVER_PEER_SERVICE_H_
#define KVT_SERVER_PEER_SERVICE_H_

#include "proto/kvt/v1/peer.grpc.pb.h"
#include "server/daemon_context.h"
#include "server/decode_side.h"
#include "server/peer_security.h"
#include "server/prefill_side.h"

namespace kvt::server {

class PeerService final : public v1::KvtPeer::Service {
 public:
  PeerService(DaemonContext* context, const PeerSecurity* security, PrefillSide* prefill, DecodeSide* decode)
      : context_(context), security_(security), prefill_(prefill), decode_(decode) {}

  grpc::Status Hello(grpc::ServerContext* ctx, const v1::HelloRequest* request, v1::HelloResponse* response) override;
  grpc::Status OpenTransfer(grpc::ServerContext* ctx, const v1::OpenTransferRequest* request,
                            v1::OpenTransferResponse* response) override;
  grpc::Status CancelTransfer(grpc::ServerContext* ctx, const v1::CancelTransferRequest* request,
                              v1::CancelTransferResponse* response) override;

 private:
  DaemonContext* const context_;
  const PeerSecurity* const security_;
  PrefillSide* const prefill_;
  DecodeSide* const decode_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_PEER_SERVICE_H_
