#include "server/peer_security.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvt::server {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot read ", what, " \"", path, "\": ", std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(msg) : absl::NotFoundError(msg);
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (!absl::StrContains(text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", path, "\" holds no PEM block"));
  }
  return text;
}

// Equal-length-independent comparison that does not stop at the first difference.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<PeerSecurity> PeerSecurity::Load(const PeerSecurityOptions& options) {
  PeerSecurity s;
  s.token_ = options.token;
  s.server_name_ = options.server_name;
  const int given = !options.cert_file.empty() + !options.key_file.empty() + !options.ca_file.empty();
  if (given == 0) return s;
  if (given != 3) {
    return absl::InvalidArgumentError("TLS needs a certificate, its key and a CA certificate: give all three");
  }
  KVT_ASSIGN_OR_RETURN(s.cert_, ReadPem(options.cert_file, "TLS certificate"));
  KVT_ASSIGN_OR_RETURN(s.key_, ReadPem(options.key_file, "TLS key"));
  KVT_ASSIGN_OR_RETURN(s.ca_, ReadPem(options.ca_file, "TLS CA certificate"));
  return s;
}

std::shared_ptr<grpc::ServerCredentials> PeerSecurity::ServerCredentials() const {
  if (!tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = ca_;
  ssl.pem_key_cert_pairs.push_back({key_, cert_});
  return grpc::SslServerCredentials(ssl);
}

std::shared_ptr<grpc::ChannelCredentials> PeerSecurity::ChannelCredentials() const {
  if (!tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_;
  ssl.pem_private_key = key_;
  ssl.pem_cert_chain = cert_;
  return grpc::SslCredentials(ssl);
}

grpc::ChannelArguments PeerSecurity::ChannelArgs() const {
  grpc::ChannelArguments args;
  if (tls() && !server_name_.empty()) args.SetSslTargetNameOverride(server_name_);
  return args;
}

void PeerSecurity::Attach(grpc::ClientContext* context) const {
  if (!token_.empty()) context->AddMetadata(kTokenMetadataKey, token_);
}

grpc::Status PeerSecurity::Authenticate(const grpc::ServerContext& context) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kTokenMetadataKey);
  if (it == metadata.end() ||
      !ConstantTimeEquals(absl::string_view(it->second.data(), it->second.size()), token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong kvt-token: start both daemons with the same --peer_token");
  }
  return grpc::Status::OK;
}

}  // namespace kvt::server
