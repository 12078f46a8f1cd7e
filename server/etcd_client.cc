#include "server/etcd_client.h"

#include <utility>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace kvt::server {
namespace {

absl::StatusOr<std::string> Target(const std::string& endpoint, bool tls) {
  std::string target = endpoint;
  if (absl::StartsWith(target, "https://")) {
    if (!tls) {
      return absl::InvalidArgumentError(absl::StrCat("etcd endpoint \"", endpoint, "\" is https: give the CA that "
                                                     "signs etcd's certificate (--etcd_ca)"));
    }
    target = target.substr(8);
  }
  if (absl::StartsWith(target, "http://")) {
    if (tls) {
      return absl::InvalidArgumentError(absl::StrCat("etcd endpoint \"", endpoint, "\" is http:// but TLS files "
                                                     "are given: use https:// or host:port"));
    }
    target = target.substr(7);
  }
  while (!target.empty() && target.back() == '/') target.pop_back();
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size()) {
    return absl::InvalidArgumentError(absl::StrCat("etcd endpoint \"", endpoint, "\" must be host:port or "
                                                   "http://host:port"));
  }
  return target;
}

bool Unreachable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  if (!in || content.str().empty()) {
    return absl::NotFoundError(absl::StrCat("cannot read the etcd ", what, " \"", path, "\""));
  }
  return content.str();
}

absl::StatusOr<std::string> ReadEtcdPassword(const std::string& path) {
  std::ifstream in(path);
  std::string password;
  if (!in || !std::getline(in, password) || password.empty()) {
    return absl::NotFoundError(absl::StrCat("cannot read a password from \"", path, "\" (its first line)"));
  }
  return password;
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoints");
  const bool tls = !options.ca_file.empty();
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError("an etcd client certificate needs its key, and a key its certificate");
  }
  if (!tls && !options.cert_file.empty()) {
    return absl::InvalidArgumentError("an etcd client certificate needs the CA of etcd's (--etcd_ca)");
  }
  std::vector<std::string> targets;
  for (const std::string& endpoint : options.endpoints) {
    KVT_ASSIGN_OR_RETURN(std::string target, Target(endpoint, tls));
    targets.push_back(std::move(target));
  }
  options.endpoints = std::move(targets);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    KVT_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.ca_file, "CA"));
    if (!options.cert_file.empty()) {
      KVT_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(options.cert_file, "client certificate"));
      KVT_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(options.key_file, "client key"));
    }
    credentials = grpc::SslCredentials(ssl);
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(credentials)));
}

EtcdClient::EtcdClient(EtcdOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : endpoints_(std::move(options.endpoints)),
      call_timeout_(options.call_timeout),
      username_(std::move(options.username)),
      password_(std::move(options.password)) {
  // Reconnect within a second of etcd coming back (gRPC's default backoff grows to two minutes).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A watch has no deadline: HTTP/2 pings find an etcd host that vanished without closing the connection (etcd
  // accepts pings every 5 s or slower).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  for (const std::string& target : endpoints_) {
    const std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(target, credentials, args);
    stubs_.push_back({etcdserverpb::KV::NewStub(channel), etcdserverpb::Lease::NewStub(channel),
                      etcdserverpb::Watch::NewStub(channel), etcdserverpb::Auth::NewStub(channel)});
  }
}

size_t EtcdClient::CurrentIndex() {
  kvt::MutexLock lock(&mu_);
  return current_;
}

void EtcdClient::MoveOnFrom(size_t index) {
  kvt::MutexLock lock(&mu_);
  if (current_ == index) current_ = (current_ + 1) % stubs_.size();  // unless another call moved on already
}

void EtcdClient::AddToken(grpc::ClientContext* context) {
  kvt::MutexLock lock(&mu_);
  if (!token_.empty()) context->AddMetadata("token", token_);
}

absl::Status EtcdClient::Authenticate(const Stubs& stubs) {
  etcdserverpb::AuthenticateRequest request;
  request.set_name(username_);
  request.set_password(password_);
  etcdserverpb::AuthenticateResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, call_timeout_);
  const grpc::Status s = stubs.auth->Authenticate(&context, request, &response);
  if (!s.ok()) {
    const absl::Status status = FromGrpcStatus(s);
    return absl::Status(status.code(), absl::StrCat("etcd authentication as \"", username_, "\": ", status.message()));
  }
  kvt::MutexLock lock(&mu_);
  token_ = response.token();
  return absl::OkStatus();
}

absl::Status EtcdClient::EnsureToken(const Stubs& stubs) {
  if (username_.empty()) return absl::OkStatus();
  {
    kvt::MutexLock lock(&mu_);
    if (!token_.empty()) return absl::OkStatus();
  }
  return Authenticate(stubs);
}

absl::Status EtcdClient::Call(const std::function<grpc::Status(const Stubs&, grpc::ClientContext*)>& call) {
  absl::Status last;
  for (size_t attempt = 0; attempt < stubs_.size(); ++attempt) {
    const size_t index = CurrentIndex();
    const Stubs& stubs = stubs_[index];
    last = EnsureToken(stubs);
    if (last.ok()) {
      grpc::ClientContext context;
      SetDeadline(&context, call_timeout_);
      AddToken(&context);
      grpc::Status s = call(stubs, &context);
      if (!s.ok() && !username_.empty() && absl::StrContains(s.error_message(), "invalid auth token")) {
        // The token expired (etcd's simple tokens last minutes): authenticate again, then retry once.
        if (Authenticate(stubs).ok()) {
          grpc::ClientContext retry;
          SetDeadline(&retry, call_timeout_);
          AddToken(&retry);
          s = call(stubs, &retry);
        }
      }
      if (s.ok()) return absl::OkStatus();
      last = FromGrpcStatus(s);
    }
    if (!Unreachable(last.code())) break;
    MoveOnFrom(index);
  }
  return absl::Status(last.code(), absl::StrCat("etcd (", absl::StrJoin(endpoints_, ","), "): ", last.message()));
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(ttl)));
  etcdserverpb::LeaseGrantResponse response;
  KVT_RETURN_IF_ERROR(Call([&](const Stubs& stubs, grpc::ClientContext* context) {
    return stubs.lease->LeaseGrant(context, request, &response);
  }));
  if (!response.error().empty()) return absl::UnavailableError(absl::StrCat("etcd lease: ", response.error()));
  return response.id();
}

absl::StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  etcdserverpb::LeaseKeepAliveResponse response;
  KVT_RETURN_IF_ERROR(Call([&](const Stubs& stubs, grpc::ClientContext* context) {
    auto stream = stubs.lease->LeaseKeepAlive(context);
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    if (!stream->Write(request) || !stream->Read(&response)) {
      stream->WritesDone();
      grpc::Status s = stream->Finish();
      return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream closed") : s;
    }
    stream->WritesDone();
    return stream->Finish();
  }));
  return response.ttl();
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return Call([&](const Stubs& stubs, grpc::ClientContext* context) {
    return stubs.lease->LeaseRevoke(context, request, &response);
  });
}

absl::Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  return Call([&](const Stubs& stubs, grpc::ClientContext* context) {
    return stubs.kv->Put(context, request, &response);
  });
}

absl::StatusOr<std::optional<std::string>> EtcdClient::Get(const std::string& key) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  etcdserverpb::RangeResponse response;
  KVT_RETURN_IF_ERROR(Call([&](const Stubs& stubs, grpc::ClientContext* context) {
    return stubs.kv->Range(context, request, &response);
  }));
  if (response.kvs_size() == 0) return std::optional<std::string>();
  return std::optional<std::string>(response.kvs(0).value());
}

absl::StatusOr<std::vector<EtcdEntry>> EtcdClient::List(const std::string& prefix, int64_t* revision) {
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixRangeEnd(prefix));
  etcdserverpb::RangeResponse response;
  KVT_RETURN_IF_ERROR(Call([&](const Stubs& stubs, grpc::ClientContext* context) {
    return stubs.kv->Range(context, request, &response);
  }));
  if (revision != nullptr) *revision = response.header().revision();
  std::vector<EtcdEntry> out;
  for (const etcdserverpb::KeyValue& kv : response.kvs()) out.push_back({kv.key(), kv.value(), kv.lease()});
  return out;
}

absl::Status EtcdClient::Watch(const std::string& prefix, int64_t start_revision,
                               const std::function<void(const EtcdEntry&, bool deleted)>& on_event) {
  grpc::ClientContext context;  // no deadline: a watch lasts until it fails or StopWatches cancels it
  {
    kvt::MutexLock lock(&mu_);
    if (stopped_) return absl::OkStatus();
    watches_.push_back(&context);
  }
  const size_t index = CurrentIndex();
  if (absl::Status a = EnsureToken(stubs_[index]); !a.ok()) {
    kvt::MutexLock lock(&mu_);
    watches_.erase(std::find(watches_.begin(), watches_.end(), &context));
    return a;
  }
  AddToken(&context);
  auto stream = stubs_[index].watch->Watch(&context);
  etcdserverpb::WatchRequest request;
  request.mutable_create_request()->set_key(prefix);
  request.mutable_create_request()->set_range_end(PrefixRangeEnd(prefix));
  request.mutable_create_request()->set_start_revision(start_revision);
  absl::Status result = absl::UnavailableError("etcd watch stream closed");
  if (stream->Write(request)) {
    etcdserverpb::WatchResponse response;
    while (stream->Read(&response)) {
      if (response.canceled()) {
        result = absl::AbortedError(absl::StrCat("etcd cancelled the watch: ", response.cancel_reason()));
        break;
      }
      for (const etcdserverpb::Event& event : response.events()) {
        on_event({event.kv().key(), event.kv().value(), event.kv().lease()},
                 event.type() == etcdserverpb::Event::DELETE);
      }
    }
  }
  context.TryCancel();
  const grpc::Status finished = stream->Finish();
  {
    kvt::MutexLock lock(&mu_);
    watches_.erase(std::find(watches_.begin(), watches_.end(), &context));
    if (stopped_) return absl::OkStatus();
  }
  if (!finished.ok() && result.code() != absl::StatusCode::kAborted) result = FromGrpcStatus(finished);
  MoveOnFrom(index);  // the stream failed on this endpoint: the next watch tries the next one
  return result;
}

void EtcdClient::StopWatches() {
  kvt::MutexLock lock(&mu_);
  stopped_ = true;
  for (grpc::ClientContext* context : watches_) context->TryCancel();
}

}  // namespace kvt::server
