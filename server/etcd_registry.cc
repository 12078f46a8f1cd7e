#include "server/etcd_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace kvt::server {
namespace {

constexpr absl::Duration kRetry = absl::Milliseconds(500);

std::string DaemonsPrefix(const std::string& prefix) { return absl::StrCat(prefix, "/daemons/"); }

absl::StatusOr<v1::DaemonRecord> ParseRecord(const std::string& json) {
  v1::DaemonRecord record;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // records of newer daemons
  const auto s = google::protobuf::util::JsonStringToMessage(json, &record, options);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("daemon record: ", s.ToString()));
  return record;
}

std::string ToJson(const v1::DaemonRecord& record) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(record, &json);
  return json;
}

}  // namespace

std::string DaemonKey(const std::string& prefix, const std::string& id) { return DaemonsPrefix(prefix) + id; }

absl::StatusOr<std::vector<v1::DaemonRecord>> ListDaemons(EtcdClient& etcd, const std::string& prefix) {
  KVT_ASSIGN_OR_RETURN(std::vector<EtcdEntry> entries, etcd.List(DaemonsPrefix(prefix), nullptr));
  std::vector<v1::DaemonRecord> out;
  for (const EtcdEntry& entry : entries) {
    absl::StatusOr<v1::DaemonRecord> record = ParseRecord(entry.value);
    if (record.ok()) out.push_back(*std::move(record));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<EtcdRegistry>> EtcdRegistry::Start(EtcdRegistryOptions options,
                                                                  v1::DaemonRecord self) {
  if (options.prefix.empty() || options.prefix.front() != '/' || options.prefix.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("etcd prefix must start with '/' and not end with one, got \"",
                                                   options.prefix, "\""));
  }
  if (options.ttl < absl::Seconds(2)) {
    return absl::InvalidArgumentError("the etcd lease must last at least 2 s (etcd's own minimum)");
  }
  KVT_RETURN_IF_ERROR(CheckDaemonId(self.daemon_id(), "daemon_id"));
  KVT_ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> etcd, EtcdClient::Create(options.etcd));
  std::unique_ptr<EtcdRegistry> registry(new EtcdRegistry(std::move(options), std::move(self), std::move(etcd)));
  if (absl::Status s = registry->Register(); !s.ok()) {
    Logger("etcd")->error("cannot register {} in etcd yet ({}); retrying in the background", registry->self_.daemon_id(),
                          s.ToString());
  }
  registry->keepalive_ = std::thread([r = registry.get()] { r->KeepAliveLoop(); });
  registry->watcher_ = std::thread([r = registry.get()] { r->WatchLoop(); });
  return registry;
}

EtcdRegistry::EtcdRegistry(EtcdRegistryOptions options, v1::DaemonRecord self, std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)), self_(std::move(self)), self_json_(ToJson(self_)), etcd_(std::move(etcd)) {}

EtcdRegistry::~EtcdRegistry() { Stop(); }

absl::Status EtcdRegistry::Register() {
  KVT_ASSIGN_OR_RETURN(const int64_t lease, etcd_->GrantLease(options_.ttl));
  KVT_RETURN_IF_ERROR(etcd_->Put(DaemonKey(options_.prefix, self_.daemon_id()), self_json_, lease));
  kvt::MutexLock lock(&mu_);
  lease_ = lease;
  Logger("etcd")->info("registered {} as {} (lease {:x}, {} s)", self_.daemon_id(),
                       DaemonKey(options_.prefix, self_.daemon_id()), lease, absl::ToInt64Seconds(options_.ttl));
  return absl::OkStatus();
}

void EtcdRegistry::KeepAliveLoop() {
  const absl::Duration period = options_.ttl / 3;
  absl::Duration wait = registered() ? period : kRetry;
  while (!stop_.WaitForNotificationWithTimeout(wait)) {
    int64_t lease;
    {
      kvt::MutexLock lock(&mu_);
      lease = lease_;
    }
    absl::Status s;
    if (lease == 0) {
      s = Register();
    } else {
      absl::StatusOr<int64_t> left = etcd_->KeepAlive(lease);
      if (left.ok() && *left <= 0) {  // expired while etcd was away: register again under a new lease
        Logger("etcd")->warn("lease of {} expired; registering again", self_.daemon_id());
        {
          kvt::MutexLock lock(&mu_);
          lease_ = 0;
        }
        s = Register();
      } else {
        s = left.status();
      }
    }
    if (!s.ok()) Logger("etcd")->warn("etcd keep-alive of {}: {}", self_.daemon_id(), s.ToString());
    wait = s.ok() ? period : kRetry;
  }
}

void EtcdRegistry::WatchLoop() {
  const std::string prefix = DaemonsPrefix(options_.prefix);
  while (!stop_.HasBeenNotified()) {
    int64_t revision = 0;
    absl::StatusOr<std::vector<EtcdEntry>> entries = etcd_->List(prefix, &revision);
    if (!entries.ok()) {
      stop_.WaitForNotificationWithTimeout(kRetry);
      continue;
    }
    {
      kvt::MutexLock lock(&mu_);
      addresses_.clear();
      for (const EtcdEntry& entry : *entries) {
        absl::StatusOr<v1::DaemonRecord> record = ParseRecord(entry.value);
        if (record.ok()) addresses_[record->daemon_id()] = record->peer_address();
      }
    }
    const absl::Status s = etcd_->Watch(prefix, revision + 1, [&](const EtcdEntry& entry, bool deleted) {
      const std::string id = entry.key.substr(prefix.size());
      kvt::MutexLock lock(&mu_);
      if (deleted) {
        addresses_.erase(id);
        return;
      }
      absl::StatusOr<v1::DaemonRecord> record = ParseRecord(entry.value);
      if (record.ok()) addresses_[id] = record->peer_address();
    });
    if (!s.ok() && !stop_.HasBeenNotified()) {
      Logger("etcd")->debug("etcd watch ended: {}", s.ToString());
      stop_.WaitForNotificationWithTimeout(kRetry);
    }
  }
}

absl::StatusOr<std::string> EtcdRegistry::Resolve(absl::string_view name) {
  if (IsHostPort(name) && name.size() <= 255) return std::string(name);
  KVT_RETURN_IF_ERROR(CheckDaemonId(name, "peer"));
  const std::string id(name);
  {
    kvt::MutexLock lock(&mu_);
    if (auto it = addresses_.find(id); it != addresses_.end()) return it->second;
  }
  // Not (yet) in the watch's cache: ask etcd itself.
  absl::StatusOr<std::optional<std::string>> value = etcd_->Get(DaemonKey(options_.prefix, id));
  if (!value.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot look up daemon \"", id, "\": ", value.status().message()));
  }
  if (!value->has_value()) {
    return absl::NotFoundError(absl::StrCat("no daemon \"", id, "\" is registered in etcd under ", options_.prefix,
                                            " (not started, or its lease expired); `kvtctl peers` lists them"));
  }
  absl::StatusOr<v1::DaemonRecord> record = ParseRecord(**value);
  if (!record.ok() || !IsHostPort(record->peer_address())) {
    return absl::FailedPreconditionError(absl::StrCat("the etcd record of daemon \"", id, "\" has no usable peer "
                                                      "address (", record.ok() ? record->peer_address() :
                                                      record.status().message(), ")"));
  }
  return record->peer_address();
}

std::vector<std::string> EtcdRegistry::CachedIds() const {
  kvt::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, address] : addresses_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool EtcdRegistry::registered() const {
  kvt::MutexLock lock(&mu_);
  return lease_ != 0 && !halted_;
}

void EtcdRegistry::Stop() { Halt(/*revoke=*/true); }
void EtcdRegistry::Abandon() { Halt(/*revoke=*/false); }

void EtcdRegistry::Halt(bool revoke) {
  {
    kvt::MutexLock lock(&mu_);
    if (halted_) return;
    halted_ = true;
  }
  stop_.Notify();
  etcd_->StopWatches();
  if (keepalive_.joinable()) keepalive_.join();
  if (watcher_.joinable()) watcher_.join();
  int64_t lease;
  {  // after the joins: a registration the keep-alive thread was making is revoked too
    kvt::MutexLock lock(&mu_);
    lease = lease_;
  }
  if (revoke && lease != 0) {
    if (absl::Status s = etcd_->RevokeLease(lease); !s.ok()) {
      Logger("etcd")->warn("revoking the lease of {}: {} (it expires in {} s)", self_.daemon_id(), s.ToString(),
                           absl::ToInt64Seconds(options_.ttl));
    }
  }
}

}  // namespace kvt::server
