#include "collective/nccl_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvt::collective {
namespace {

constexpr int kNcclSuccess = 0;
constexpr int kNcclSum = 0;

size_t TypeBytes(NcclType type) {
  switch (type) {
    case NcclType::kUint8:
      return 1;
    case NcclType::kFloat16:
    case NcclType::kBfloat16:
      return 2;
    case NcclType::kFloat32:
      break;
  }
  return 4;
}

template <typename F>
bool Resolve(void* handle, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(handle, name));
  return *f != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclLibrary>> NcclLibrary::Load(const std::string& path) {
  std::unique_ptr<NcclLibrary> lib(new NcclLibrary());
  lib->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot load NCCL from ", path, ": ", dlerror()));
  }
  void* h = lib->handle_;
  if (!Resolve(h, "ncclGetVersion", &lib->get_version_) || !Resolve(h, "ncclGetUniqueId", &lib->get_unique_id_) ||
      !Resolve(h, "ncclCommInitRank", &lib->comm_init_rank_) ||
      !Resolve(h, "ncclCommDestroy", &lib->comm_destroy_) || !Resolve(h, "ncclCommAbort", &lib->comm_abort_) ||
      !Resolve(h, "ncclAllReduce", &lib->all_reduce_) ||
      !Resolve(h, "ncclSend", &lib->send_) || !Resolve(h, "ncclRecv", &lib->recv_) ||
      !Resolve(h, "ncclGroupStart", &lib->group_start_) || !Resolve(h, "ncclGroupEnd", &lib->group_end_) ||
      !Resolve(h, "ncclGetErrorString", &lib->error_string_)) {
    return absl::NotFoundError(absl::StrCat(path, " lacks an NCCL symbol: ", dlerror()));
  }
  return lib;
}

NcclLibrary::~NcclLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

absl::Status NcclLibrary::Check(int result, const char* what) const {
  if (result == kNcclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s: NCCL error %d (%s)", what, result, error_string_(result)));
}

std::string NcclLibrary::Version() const {
  int v = 0;
  if (get_version_(&v) != kNcclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return absl::StrFormat("%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

absl::StatusOr<NcclId> NcclLibrary::NewId() const {
  NcclId id{};
  if (absl::Status s = Check(get_unique_id_(&id), "ncclGetUniqueId"); !s.ok()) return s;
  return id;
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclLibrary::InitRank(int world, const NcclId& id, int rank) const {
  void* comm = nullptr;
  if (absl::Status s = Check(comm_init_rank_(&comm, world, id, rank), "ncclCommInitRank"); !s.ok()) return s;
  return std::unique_ptr<NcclComm>(new NcclComm(this, comm));
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclLibrary::InitOverWire(CollectiveWire& wire, absl::Time deadline) const {
  NcclId id{};
  const auto bytes = absl::MakeSpan(reinterpret_cast<uint8_t*>(&id), sizeof(id));
  if (wire.rank() == 0) {
    absl::StatusOr<NcclId> made = NewId();
    if (!made.ok()) return made.status();
    id = *made;
    for (int r = 1; r < wire.world_size(); ++r) {
      if (absl::Status s = wire.Send(r, bytes, deadline); !s.ok()) return s;
    }
  } else if (absl::Status s = wire.Receive(0, bytes, deadline); !s.ok()) {
    return s;
  }
  return InitRank(wire.world_size(), id, wire.rank());
}

NcclComm::~NcclComm() { abort_ ? lib_->comm_abort_(comm_) : lib_->comm_destroy_(comm_); }

absl::Status NcclComm::AllReduce(const void* in, void* out, size_t count, NcclType type, void* stream) {
  return lib_->Check(lib_->all_reduce_(in, out, count, static_cast<int>(type), kNcclSum, comm_, stream),
                     "ncclAllReduce");
}

absl::Status NcclComm::AllToAll(const void* in, void* out, size_t count_per_peer, NcclType type, int world,
                                void* stream) {
  const size_t block = count_per_peer * TypeBytes(type);
  if (absl::Status s = lib_->Check(lib_->group_start_(), "ncclGroupStart"); !s.ok()) return s;
  absl::Status result;
  for (int r = 0; r < world && result.ok(); ++r) {
    result = lib_->Check(lib_->send_(static_cast<const char*>(in) + r * block, count_per_peer,
                                     static_cast<int>(type), r, comm_, stream),
                         "ncclSend");
    if (result.ok()) {
      result = lib_->Check(
          lib_->recv_(static_cast<char*>(out) + r * block, count_per_peer, static_cast<int>(type), r, comm_, stream),
          "ncclRecv");
    }
  }
  const absl::Status end = lib_->Check(lib_->group_end_(), "ncclGroupEnd");
  return result.ok() ? end : result;
}

}  // namespace kvt::collective
