// A POSIX shared-memory segment created by an engine for its KV cache, to register with kvtd. RAII: the
// segment is unmapped and unlinked when the object dies (the daemon's own mapping stays valid until it
// unregisters the region). Thread-compatible.
//
//   KVT_ASSIGN_OR_RETURN(auto kv, kvt::client::ShmSegment::Create("/my-engine-kv", bytes));
//   Fill(kv->data(), kv->size());  client->RegisterRegion("kv0", layout, kv->name(), kv->size());
#ifndef KVT_CLIENT_SHM_SEGMENT_H_
#define KVT_CLIENT_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvt::client {

class ShmSegment {
 public:
  // Creates (exclusively) and maps a zero-filled segment of `size` bytes with permissions `mode`.
  // INVALID_ARGUMENT for a bad name (one leading '/', 2..255 bytes, no other '/') or size 0; ALREADY_EXISTS if
  // the name is taken; RESOURCE_EXHAUSTED when /dev/shm has no room.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, uint64_t size,
                                                            uint32_t mode = 0600);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  ShmSegment(std::string name, uint8_t* data, uint64_t size) : name_(std::move(name)), data_(data), size_(size) {}

  const std::string name_;
  uint8_t* const data_;
  const uint64_t size_;
};

}  // namespace kvt::client

#endif  // KVT_CLIENT_SHM_SEGMENT_H_
