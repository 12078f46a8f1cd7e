// Options of a transport endpoint (one per daemon): chunking, lanes, rate limit, flow control, failure
// detection, and which transports UCX may use. Plain data; validate with ValidateOptions before use.
#ifndef KVT_TRANSPORT_OPTIONS_H_
#define KVT_TRANSPORT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/clock.h"

namespace kvt::transport {

// Most UCX workers a transport may have (Options::ucx_workers).
inline constexpr int kMaxUcxWorkers = 16;
// Largest chunk payload a transport takes (Options::chunk_bytes), in KiB: 64 MiB.
inline constexpr uint32_t kMaxChunkKib = 64 << 10;

// Options::chunk_bytes of a flag given in KiB (`flag`, as the user typed it, names it in the error):
// INVALID_ARGUMENT unless 1 <= kib <= kMaxChunkKib.
absl::StatusOr<uint32_t> ChunkBytesFromKib(int64_t kib, absl::string_view flag);

struct Options {
  // Largest chunk payload. Bounds how long an anchor waits behind a residual chunk (one chunk time).
  uint32_t chunk_bytes = 512 << 10;
  // A residual lane that has waited this long while anchors kept going is served one chunk.
  absl::Duration starvation_bound = absl::Seconds(1);

  // Token bucket per peer link over bytes on the wire (chunk header + payload). 0 = unlimited.
  double rate_bytes_per_second = 0;
  // Bucket depth; 0 means two chunks (headers included): one chunk may go while the next one's tokens
  // accumulate, so waking late from a pacing sleep loses no rate.
  int64_t burst_bytes = 0;

  // Flow control. The sender keeps at most min(own max_inflight_bytes, peer's max_receive_buffer_bytes) of chunk
  // bytes unacknowledged per link; the receiver holds at most max_receive_buffer_bytes of received, unconsumed
  // chunk bytes per link. Both must be >= chunk_bytes + kChunkHeaderBytes.
  int64_t max_inflight_bytes = 32 << 20;
  int64_t max_receive_buffer_bytes = 32 << 20;
  // Outbound transfers queued or in flight per link; Send beyond this fails with RESOURCE_EXHAUSTED.
  int max_transfers_per_link = 1024;

  // Failure detection. A link from which nothing (data, credit or heartbeat) arrived for peer_timeout is down:
  // its transfers fail with UNAVAILABLE. A link that has had data waiting for credit for stall_timeout with no
  // credit arriving fails its outbound transfers with DEADLINE_EXCEEDED.
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  absl::Duration peer_timeout = absl::Seconds(3);
  absl::Duration stall_timeout = absl::Seconds(10);

  // UCX (ignored by the loopback transport). Passed to ucp_config_modify, never read from the environment.
  // ucx_tls: UCX_TLS, e.g. "tcp", "shm", "sm,cma", "posix", "rc,ud" ("" = UCX's default, all).
  std::string ucx_tls = "tcp";
  // UCX_NET_DEVICES, e.g. "lo" or "veth0" ("" = UCX's default, all). Restricts which interfaces the tcp
  // transport listens on and advertises in the worker address.
  std::string ucx_net_devices = "";
  // UCX workers per transport, 1..16. With more than one, each worker runs on a progress thread of its own and a
  // link stripes its chunks over min(own, peer's) workers, so that UCX's copies (the bound on one worker's
  // goodput) use that many cores on each side; the engine then computes and checks CRC32C on as many threads. One
  // worker is driven by the engine's progress thread.
  int ucx_workers = 1;

  // Clock used for pacing and timeouts; null = RealClock(). Must outlive the transport.
  const Clock* clock = nullptr;
};

// The UCX workers a transport uses when not told (kvtd --ucx_workers=0): a quarter of `cores`, 1 to 4. One worker's
// copies bound a link to about one core's copy rate (docs/BENCHMARKS.md, "Striping over UCX workers"). Eight were
// tried on a 64-core H200 host and moved less over tcp on loopback than four (48-56 against 73-99 Gbit/s;
// docs/BENCHMARKS.md, "Line rate"). The rest of the cores go to the engine, checksum and codec threads.
int DefaultUcxWorkers(int cores);

// Checks the options and fills defaults (burst, clock). INVALID_ARGUMENT names the bad field.
absl::StatusOr<Options> ValidateOptions(Options options);

}  // namespace kvt::transport

#endif  // KVT_TRANSPORT_OPTIONS_H_
