#include "server/peer_liveness.h"

#include <vector>


namespace kvt::server {

PeerLiveness::PeerLiveness(const PeerDirectory* directory, const PeerSecurity* security, absl::Duration interval,
                           int misses)
    : directory_(directory), security_(security), interval_(interval), misses_(misses) {
  thread_ = std::thread([this] { Run(); });
}

PeerLiveness::~PeerLiveness() {
  {
    kvt::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void PeerLiveness::Watch(const std::string& address) {
  kvt::MutexLock lock(&mu_);
  std::shared_ptr<Target>& t = targets_[address];
  if (t == nullptr) {
    t = std::make_shared<Target>();
    t->stub = v1::KvtPeer::NewStub(
        grpc::CreateCustomChannel(address, security_->ChannelCredentials(), security_->ChannelArgs()));
  }
  ++t->users;
}

void PeerLiveness::Unwatch(const std::string& address) {
  kvt::MutexLock lock(&mu_);
  auto it = targets_.find(address);
  if (it != targets_.end() && --it->second->users <= 0) targets_.erase(it);
}

bool PeerLiveness::Dead(const std::string& address) const {
  kvt::MutexLock lock(&mu_);
  auto it = targets_.find(address);
  return it != targets_.end() && it->second->missed >= misses_;
}

void PeerLiveness::Run() {
  while (true) {
    std::vector<std::shared_ptr<Target>> targets;
    {
      kvt::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; }, interval_)) {
        return;
      }
      for (auto& [address, t] : targets_) targets.push_back(t);
    }
    for (const std::shared_ptr<Target>& t : targets) {
      v1::HelloRequest hello;
      hello.set_protocol_version(kPeerProtocolVersion);
      hello.set_daemon_id(directory_->self().daemon_id);
      hello.set_container_version(directory_->self().container_version);
      v1::HelloResponse answer;
      grpc::ClientContext call;
      directory_->PrepareCall(&call, absl::Now() + interval_);
      const bool alive = t->stub->Hello(&call, hello, &answer).ok();
      kvt::MutexLock lock(&mu_);
      t->missed = alive ? 0 : t->missed + 1;
    }
  }
}

}  // namespace kvt::server
