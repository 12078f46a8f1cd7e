#include "server/region_registry.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/options.h"

namespace kvt::server {

RegionLease::RegionLease(std::shared_ptr<Region> region) : region_(std::move(region)) {
  if (region_ != nullptr) region_->leases_.fetch_add(1);
}

RegionLease& RegionLease::operator=(RegionLease&& o) noexcept {
  if (this != &o) {
    if (region_ != nullptr) region_->leases_.fetch_sub(1);
    region_ = std::move(o.region_);
  }
  return *this;
}

RegionLease::~RegionLease() {
  if (region_ != nullptr) region_->leases_.fetch_sub(1);
}

absl::Status RegionRegistry::RegisterShm(const std::string& region_id, const kv::KvLayoutSpec& spec,
                                         const std::string& shm_name, uint64_t size_bytes) {
  KVT_RETURN_IF_ERROR(ValidateId(region_id, "region_id", 128));
  {
    kvt::MutexLock lock(&mu_);
    if (regions_.contains(region_id)) {
      return absl::AlreadyExistsError(absl::StrCat("region \"", region_id, "\" is already registered"));
    }
  }
  KVT_ASSIGN_OR_RETURN(kv::KvLayout layout, kv::KvLayout::Create(spec, size_bytes));
  KVT_ASSIGN_OR_RETURN(std::unique_ptr<ShmRegion> memory, ShmRegion::Open(shm_name, size_bytes));
  return Publish(std::make_shared<Region>(region_id, layout, std::move(memory)));
}

absl::Status RegionRegistry::RegisterCudaIpc(const std::string& region_id, const kv::KvLayoutSpec& spec,
                                             const std::string& handle, uint64_t size_bytes, int device,
                                             uint64_t offset_bytes) {
  KVT_RETURN_IF_ERROR(ValidateId(region_id, "region_id", 128));
  KVT_ASSIGN_OR_RETURN(kv::KvLayout layout, kv::KvLayout::Create(spec, size_bytes));
  KVT_ASSIGN_OR_RETURN(std::unique_ptr<IpcMapping> memory, IpcMapping::Open(handle, size_bytes, device, offset_bytes));
  return Publish(std::make_shared<Region>(region_id, layout, std::move(memory)));
}

absl::Status RegionRegistry::Publish(std::shared_ptr<Region> region) {
  kvt::MutexLock lock(&mu_);
  const std::string id = region->id();
  if (!regions_.emplace(id, std::move(region)).second) {
    return absl::AlreadyExistsError(absl::StrCat("region \"", id, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::Status RegionRegistry::Unregister(const std::string& region_id) {
  kvt::MutexLock lock(&mu_);
  auto it = regions_.find(region_id);
  if (it == regions_.end()) return absl::NotFoundError(absl::StrCat("no region \"", region_id, "\""));
  const int leases = it->second->leases_.load();
  if (leases > 0) {
    return absl::FailedPreconditionError(absl::StrCat("region \"", region_id, "\" is in use by ", leases,
                                                      " request(s); cancel them or wait for them to finish"));
  }
  regions_.erase(it);  // unmapped when the last reference goes
  return absl::OkStatus();
}

absl::StatusOr<RegionLease> RegionRegistry::Acquire(const std::string& region_id) const {
  kvt::MutexLock lock(&mu_);
  auto it = regions_.find(region_id);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("no region \"", region_id, "\"; register it first"));
  }
  return RegionLease(it->second);
}

size_t RegionRegistry::size() const {
  kvt::MutexLock lock(&mu_);
  return regions_.size();
}

}  // namespace kvt::server
