#include "client/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvt::client {

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, uint64_t size,
                                                               uint32_t mode) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm name \"", name, "\" must be 2..255 bytes with one leading '/' and no other"));
  }
  if (size == 0) return absl::InvalidArgumentError("shm segment size must be positive");
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, mode);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("shm_open ", name, ": ", std::strerror(err));
    return err == EEXIST ? absl::AlreadyExistsError(msg) : absl::InternalError(msg);
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot size shm segment ", name, " to ", size,
                                                     " bytes: ", std::strerror(err)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("mmap of shm segment ", name, ": ", std::strerror(err)));
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, static_cast<uint8_t*>(p), size));
}

ShmSegment::~ShmSegment() {
  munmap(data_, size_);
  shm_unlink(name_.c_str());
}

}  // namespace kvt::client
