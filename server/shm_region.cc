#include "server/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvt::server {
namespace {

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

absl::Status ErrnoStatus(int err, absl::string_view what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace

absl::Status ValidateShmName(absl::string_view name) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' || name.find('/', 1) != absl::string_view::npos ||
      name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("shm name \"", name,
                                                   "\" is invalid: it must be '/' then 1..254 bytes without '/'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Open(absl::string_view name, uint64_t size_bytes) {
  if (absl::Status s = ValidateShmName(name); !s.ok()) return s;
  if (size_bytes == 0) return absl::InvalidArgumentError("shm region size is 0");
  const std::string name_str(name);
  const int fd = shm_open(name_str.c_str(), O_RDWR, 0);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open(", name_str, ")"));
  FdCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", name_str, ")"));
  if (static_cast<uint64_t>(st.st_size) < size_bytes) {
    return absl::OutOfRangeError(absl::StrCat("shm segment ", name_str, " has ", st.st_size, " bytes but ",
                                              size_bytes, " were registered"));
  }
  void* base = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return ErrnoStatus(errno, absl::StrCat("mmap(", name_str, ")"));
  return std::unique_ptr<ShmRegion>(new ShmRegion(name_str, static_cast<uint8_t*>(base), size_bytes));
}

ShmRegion::~ShmRegion() { munmap(base_, size_); }

absl::StatusOr<absl::Span<uint8_t>> ShmRegion::Bytes(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", +", length, ") lie outside shm region ", name_,
                                              " of ", size_, " bytes"));
  }
  return absl::Span<uint8_t>(base_ + offset, length);
}

}  // namespace kvt::server
