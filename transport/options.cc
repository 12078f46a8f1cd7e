#include "transport/options.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "transport/chunk_header.h"

namespace kvt::transport {

int DefaultUcxWorkers(int cores) { return std::clamp(cores / 4, 1, 4); }

absl::StatusOr<uint32_t> ChunkBytesFromKib(int64_t kib, absl::string_view flag) {
  if (kib < 1 || kib > kMaxChunkKib) {  // checked before the shift can wrap
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be in 1..%d (KiB: at most %d MiB, the transport's largest chunk), got %d", flag,
                        kMaxChunkKib, kMaxChunkKib >> 10, kib));
  }
  return static_cast<uint32_t>(kib) << 10;
}

absl::StatusOr<Options> ValidateOptions(Options o) {
  const int64_t wire_chunk = int64_t{o.chunk_bytes} + static_cast<int64_t>(kChunkHeaderBytes);
  if (o.chunk_bytes == 0 || o.chunk_bytes > (kMaxChunkKib << 10)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chunk_bytes %d not in (0, %d MiB]", o.chunk_bytes, kMaxChunkKib >> 10));
  }
  if (o.starvation_bound <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("starvation_bound must be positive");
  }
  if (o.rate_bytes_per_second < 0) return absl::InvalidArgumentError("rate_bytes_per_second must be >= 0");
  if (o.burst_bytes < 0) return absl::InvalidArgumentError("burst_bytes must be >= 0");
  if (o.burst_bytes == 0) o.burst_bytes = 2 * wire_chunk;
  if (o.max_inflight_bytes < wire_chunk) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_inflight_bytes %d is below one chunk (%d)", o.max_inflight_bytes, wire_chunk));
  }
  if (o.max_receive_buffer_bytes < wire_chunk) {
    return absl::InvalidArgumentError(absl::StrFormat("max_receive_buffer_bytes %d is below one chunk (%d)",
                                                      o.max_receive_buffer_bytes, wire_chunk));
  }
  if (o.max_transfers_per_link <= 0) return absl::InvalidArgumentError("max_transfers_per_link must be positive");
  if (o.heartbeat_interval <= absl::ZeroDuration() || o.peer_timeout <= o.heartbeat_interval) {
    return absl::InvalidArgumentError("need 0 < heartbeat_interval < peer_timeout");
  }
  if (o.stall_timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("stall_timeout must be positive");
  if (o.ucx_workers < 1 || o.ucx_workers > kMaxUcxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ucx_workers %d not in [1, %d]", o.ucx_workers, kMaxUcxWorkers));
  }
  if (o.clock == nullptr) o.clock = RealClock();
  return o;
}

}  // namespace kvt::transport
