// A POSIX shared-memory segment mapped into this process: the host memory a client registers its KV cache in.
// RAII: the mapping is removed when the object dies. The segment itself belongs to the client (never unlinked
// here). Reads and writes go through bounds-checked spans. Thread-safe (immutable after creation; concurrent
// writers to overlapping bytes are the caller's business).
#ifndef KVT_SERVER_SHM_REGION_H_
#define KVT_SERVER_SHM_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvt::server {

class ShmRegion {
 public:
  // Maps `size_bytes` of the segment named `name` ("/kvt-x": one leading '/', 2..255 bytes, no other '/').
  // INVALID_ARGUMENT for a bad name or size 0; NOT_FOUND if no such segment; PERMISSION_DENIED if this process
  // may not open it; OUT_OF_RANGE if the segment is smaller than `size_bytes`.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Open(absl::string_view name, uint64_t size_bytes);

  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }

  // The bytes [offset, offset + length), or OUT_OF_RANGE (with both figures) if they are not all inside.
  absl::StatusOr<absl::Span<uint8_t>> Bytes(uint64_t offset, uint64_t length) const;

 private:
  ShmRegion(std::string name, uint8_t* base, uint64_t size) : name_(std::move(name)), base_(base), size_(size) {}

  const std::string name_;
  uint8_t* const base_;
  const uint64_t size_;
};

// Checks a shm name as ShmRegion::Open does.
absl::Status ValidateShmName(absl::string_view name);

}  // namespace kvt::server

#endif  // KVT_SERVER_SHM_REGION_H_
