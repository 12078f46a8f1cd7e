// How daemons authenticate each other on the peer service (docs/DAEMON.md): mutual TLS from PEM files when
// configured, and an optional shared token carried in the "kvt-token" metadata of every call. Immutable after
// Load; thread-safe.
#ifndef KVT_SERVER_PEER_SECURITY_H_
#define KVT_SERVER_PEER_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace kvt::server {

inline constexpr char kTokenMetadataKey[] = "kvt-token";

struct PeerSecurityOptions {
  // All three or none (then plaintext). PEM files.
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  // Name expected in the peers' server certificates; "" = the host part of the address dialled.
  std::string server_name;
  std::string token;
};

class PeerSecurity {
 public:
  // Reads the PEM files. NOT_FOUND / PERMISSION_DENIED naming the file that cannot be read; INVALID_ARGUMENT
  // when only some of the three are given or one holds no PEM block.
  static absl::StatusOr<PeerSecurity> Load(const PeerSecurityOptions& options);

  bool tls() const { return !cert_.empty(); }
  // For the peer service's listening port: TLS requiring and verifying client certificates, or insecure.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  // For dialling a peer: TLS presenting this daemon's certificate, or insecure.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  // Channel arguments for dialling (the TLS name override when server_name is set).
  grpc::ChannelArguments ChannelArgs() const;
  // Adds the token to an outgoing call.
  void Attach(grpc::ClientContext* context) const;
  // OK if the incoming call carries the configured token (or none is configured); UNAUTHENTICATED otherwise.
  grpc::Status Authenticate(const grpc::ServerContext& context) const;

 private:
  std::string cert_;
  std::string key_;
  std::string ca_;
  std::string server_name_;
  std::string token_;
};

}  // namespace kvt::server

#endif  // KVT_SERVER_PEER_SECURITY_H_
