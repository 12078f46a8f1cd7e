// A small client of etcd v3's gRPC API (proto/etcd/rpc.proto): leases, put, prefix reads and prefix watches,
// over gRPC (plaintext or TLS) to one of several endpoints (the next one is tried when one is unreachable). Every
// unary call has a deadline; a watch runs until it fails, HTTP/2 keepalive pings detecting a vanished etcd, or
// StopWatches. Thread-safe.
#ifndef KVT_SERVER_ETCD_CLIENT_H_
#define KVT_SERVER_ETCD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/etcd/rpc.grpc.pb.h"

namespace kvt::server {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port", "http://host:port", or "https://host:port" (with ca_file)
  absl::Duration call_timeout = absl::Seconds(2);
  // TLS to etcd (its --trusted-ca-file / --cert-file): the CA that signs etcd's certificate, and this client's
  // certificate and key for etcd's --client-cert-auth. With ca_file every endpoint is dialled with TLS.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // etcd's user authentication: with a username, the client authenticates (Auth.Authenticate) before its first
  // call and again when etcd says the token expired; every call and stream carries the token.
  std::string username;
  std::string password;
};

struct EtcdEntry {
  std::string key;
  std::string value;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  // INVALID_ARGUMENT for no endpoints, a malformed one, https:// without ca_file, a cert without its key (or the
  // reverse); NOT_FOUND for a PEM file that cannot be read.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);

  // A lease of `ttl` (whole seconds, at least 1); its id.
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl);
  // Renews `lease` once; the seconds it has left (0 or less: it has expired and is gone).
  absl::StatusOr<int64_t> KeepAlive(int64_t lease);
  absl::Status RevokeLease(int64_t lease);
  absl::Status Put(const std::string& key, const std::string& value, int64_t lease);
  // The value of `key`, or nullopt when it is absent.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key);
  // Every key with `prefix`, in key order, and the store's revision they were read at.
  absl::StatusOr<std::vector<EtcdEntry>> List(const std::string& prefix, int64_t* revision);

  // Watches `prefix` from `start_revision` and calls `on_event(entry, deleted)` for each change until the stream
  // ends (an error, etcd gone) or StopWatches() is called; returns why it ended (OK after StopWatches).
  absl::Status Watch(const std::string& prefix, int64_t start_revision,
                     const std::function<void(const EtcdEntry&, bool deleted)>& on_event);
  // Ends every Watch in progress, now and for good.
  void StopWatches();

  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  // One endpoint's channel, as the stubs of the services used (made once; gRPC stubs are thread-safe).
  struct Stubs {
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };

  EtcdClient(EtcdOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials);
  // Runs `call` against the current endpoint (authenticated when a user is set), moving on to the next ones
  // while they are unreachable.
  absl::Status Call(const std::function<grpc::Status(const Stubs&, grpc::ClientContext*)>& call);
  size_t CurrentIndex();
  // After a failure on endpoint `index`: the next endpoint becomes current, unless another call moved on already.
  void MoveOnFrom(size_t index);
  // Adds the auth token (if any) to a call's metadata.
  void AddToken(grpc::ClientContext* context);
  // Authenticates through `stubs` and keeps the token. UNAUTHENTICATED for a wrong user or password.
  absl::Status Authenticate(const Stubs& stubs);
  // Authenticates if a user is set and no token is held yet.
  absl::Status EnsureToken(const Stubs& stubs);

  const std::vector<std::string> endpoints_;
  const absl::Duration call_timeout_;
  const std::string username_;
  const std::string password_;
  std::vector<Stubs> stubs_;
  kvt::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::string token_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ClientContext*> watches_ ABSL_GUARDED_BY(mu_);
};

// The etcd password in the first line of `path` (kvtd --etcd_password_file, kvtctl peers --etcd-password-file).
// NOT_FOUND when the file cannot be read or its first line is empty.
absl::StatusOr<std::string> ReadEtcdPassword(const std::string& path);

// The key range [prefix, end) of every key that starts with `prefix` (etcd's range_end convention).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace kvt::server

#endif  // KVT_SERVER_ETCD_CLIENT_H_
