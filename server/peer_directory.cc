#include "server/peer_directory.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace kvt::server {
namespace {

constexpr size_t kMaxWorkerAddressBytes = 64 << 10;

absl::Status CheckVersions(uint32_t protocol, uint32_t container, uint32_t our_container, const std::string& who) {
  if (protocol != kPeerProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(who, " speaks peer protocol ", protocol, ", this daemon ",
                                                      kPeerProtocolVersion, "; run the same kvt version"));
  }
  if (container != our_container) {
    return absl::FailedPreconditionError(absl::StrCat(who, " reads container version ", container,
                                                      ", this daemon ", our_container,
                                                      "; run the same kvt version"));
  }
  return absl::OkStatus();
}

}  // namespace

PeerDirectory::PeerDirectory(LocalIdentity self, const PeerSecurity* security, transport::Transport* transport)
    : self_(std::move(self)), security_(security), transport_(transport) {}

void PeerDirectory::PrepareCall(grpc::ClientContext* context, absl::Time deadline) const {
  context->set_deadline(absl::ToChronoTime(deadline));
  security_->Attach(context);
}

absl::StatusOr<std::shared_ptr<const PeerConnection>> PeerDirectory::Dial(const std::string& address,
                                                                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  {
    kvt::MutexLock lock(&mu_);
    auto it = peers_.find(address);
    if (it != peers_.end()) return it->second;
  }
  kvt::MutexLock dial_lock(&dial_mu_);
  {
    kvt::MutexLock lock(&mu_);
    auto it = peers_.find(address);
    if (it != peers_.end()) return it->second;
  }
  auto peer = std::make_shared<PeerConnection>();
  peer->address = address;
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, security_->ChannelCredentials(), security_->ChannelArgs());
  if (!channel->WaitForConnected(absl::ToChronoTime(deadline))) {
    return absl::UnavailableError(absl::StrCat("cannot reach the kvtd peer service at ", address, " within ",
                                               absl::FormatDuration(timeout),
                                               "; check the address and that the daemon runs"));
  }
  peer->stub = v1::KvtPeer::NewStub(channel);
  v1::HelloRequest hello;
  hello.set_protocol_version(kPeerProtocolVersion);
  hello.set_daemon_id(self_.daemon_id);
  hello.set_ucx_worker_address(self_.data_address);
  for (const std::string& s : self_.schemes) hello.add_schemes(s);
  hello.set_container_version(self_.container_version);
  v1::HelloResponse answer;
  grpc::ClientContext context;
  PrepareCall(&context, deadline);
  const grpc::Status rpc = peer->stub->Hello(&context, hello, &answer);
  if (!rpc.ok()) {
    absl::Status s = FromGrpcStatus(rpc);
    return absl::Status(s.code(), absl::StrCat("Hello to ", address, ": ", s.message()));
  }
  KVT_RETURN_IF_ERROR(CheckVersions(answer.protocol_version(), answer.container_version(), self_.container_version,
                                    absl::StrCat("peer ", address)));
  if (answer.ucx_worker_address().empty() || answer.ucx_worker_address().size() > kMaxWorkerAddressBytes) {
    return absl::FailedPreconditionError(absl::StrCat("peer ", address, " sent a data-plane address of ",
                                                      answer.ucx_worker_address().size(), " bytes"));
  }
  peer->daemon_id = answer.daemon_id();
  peer->schemes.assign(answer.schemes().begin(), answer.schemes().end());
  KVT_ASSIGN_OR_RETURN(peer->data_peer,
                       transport_->Connect(answer.ucx_worker_address(),
                                           std::max(absl::Milliseconds(1), deadline - absl::Now())));
  Logger("server")->info("connected to peer {} ({}), data plane link {}", peer->daemon_id, address,
                         peer->data_peer);
  kvt::MutexLock lock(&mu_);
  peers_[address] = peer;
  return std::shared_ptr<const PeerConnection>(peer);
}

void PeerDirectory::CancelOnPeer(const std::string& address, const std::string& request_id,
                                 const absl::Status& why) {
  absl::StatusOr<std::shared_ptr<const PeerConnection>> peer = Dial(address, absl::Seconds(1));
  if (!peer.ok()) return;
  v1::CancelTransferRequest cancel;
  cancel.set_request_id(request_id);
  cancel.set_reason(std::string(why.message()));
  cancel.set_status_code(static_cast<int32_t>(why.code()));
  v1::CancelTransferResponse response;
  grpc::ClientContext call;
  PrepareCall(&call, absl::Now() + absl::Seconds(2));
  (void)(*peer)->stub->CancelTransfer(&call, cancel, &response);  // best effort, as said
}

void PeerDirectory::Forget(const std::string& address) {
  kvt::MutexLock lock(&mu_);
  peers_.erase(address);
}

absl::StatusOr<v1::HelloResponse> PeerDirectory::Answer(const v1::HelloRequest& request) const {
  KVT_RETURN_IF_ERROR(CheckVersions(request.protocol_version(), request.container_version(),
                                    self_.container_version, absl::StrCat("peer ", request.daemon_id())));
  if (request.ucx_worker_address().size() > kMaxWorkerAddressBytes) {
    return absl::InvalidArgumentError("ucx_worker_address is longer than 64 KiB");
  }
  v1::HelloResponse response;
  response.set_protocol_version(kPeerProtocolVersion);
  response.set_daemon_id(self_.daemon_id);
  response.set_ucx_worker_address(self_.data_address);
  for (const std::string& s : self_.schemes) response.add_schemes(s);
  response.set_container_version(self_.container_version);
  return response;
}

}  // namespace kvt::server
