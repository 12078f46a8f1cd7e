// The KvtClient gRPC service (proto/kvt/v1/client.proto): the edge where engines' requests are validated field
// by field and turned into calls on the region registry and the two sides; absl::Status becomes grpc::Status
// here and nowhere else. Thread-safe (gRPC calls it from its own threads).
#ifndef KVT_SERVER_CLIENT_SERVICE_H_
#define KVT_SERVER_CLIENT_SERVICE_H_

#include "proto/kvt/v1/client.grpc.pb.h"
#include "server/daemon_context.h"
#include "server/decode_side.h"
#include "server/prefill_side.h"

namespace kvt::server {

class ClientService final : public v1::KvtClient::Service {
 public:
  // `prefill` / `decode` are null when the daemon's role leaves that side out. All pointers outlive the service.
  ClientService(DaemonContext* context, PrefillSide* prefill, DecodeSide* decode)
      : context_(context), prefill_(prefill), decode_(decode) {}

  grpc::Status RegisterRegion(grpc::ServerContext* ctx, const v1::RegisterRegionRequest* request,
                              v1::RegisterRegionResponse* response) override;
  grpc::Status UnregisterRegion(grpc::ServerContext* ctx, const v1::UnregisterRegionRequest* request,
                                v1::UnregisterRegionResponse* response) override;
  grpc::Status Offer(grpc::ServerContext* ctx, const v1::OfferRequest* request, v1::OfferResponse* response) override;
  grpc::Status Expect(grpc::ServerContext* ctx, const v1::ExpectRequest* request,
                      v1::ExpectResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::TransferEvent>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* ctx, const v1::CancelRequest* request,
                      v1::CancelResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const v1::StatsRequest* request, v1::StatsResponse* response) override;
  grpc::Status Profile(grpc::ServerContext* ctx, const v1::ProfileRequest* request,
                       v1::ProfileResponse* response) override;

 private:
  DaemonContext* const context_;
  PrefillSide* const prefill_;
  DecodeSide* const decode_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_CLIENT_SERVICE_H_
