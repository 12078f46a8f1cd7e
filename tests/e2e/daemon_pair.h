// Test fixture pieces for end-to-end tests: a prefill and a decode daemon in this process (port 0, sockets in
// the test's temp dir), KV caches in shared memory with a layout, filled with a seeded pattern, and the bytes a
// decode region must hold after a transfer (computed with the codec directly).
#ifndef KVT_TESTS_E2E_DAEMON_PAIR_H_
#define KVT_TESTS_E2E_DAEMON_PAIR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/shm_segment.h"
#include "kv/kv_layout.h"
#include "proto/kvt/v1/layout.pb.h"
#include "server/daemon.h"

namespace kvt::e2e {

// A KV cache in a shared-memory segment, with its layout.
struct KvCache {
  kv::KvLayoutSpec spec;
  std::unique_ptr<client::ShmSegment> memory;
  v1::KvLayout proto() const;
};

// Dense layout: [layer][K/V][num_blocks][...] with the given order and dtype.
kv::KvLayoutSpec DenseLayout(uint32_t layers, uint32_t blocks, uint32_t block_tokens, uint32_t heads,
                                 uint32_t head_dim, kv::KvDType dtype = kv::KvDType::kBfloat16,
                                 kv::BlockOrder order = kv::BlockOrder::kNhd, uint32_t head_begin = 0,
                                 uint32_t total_heads = 0);

// Creates the segment (name unique per process and call) and fills every value with a seeded KV-like pattern
// (per-channel scale, a few outlier channels); `fill` false leaves zeros.
absl::StatusOr<KvCache> MakeKvCache(const kv::KvLayoutSpec& spec, uint32_t seed, bool fill);

// What the decode region's bytes must be after a full-precision transfer of `blocks_src` of `src` into
// `blocks_dst` of a region shaped like `dst` (other bytes as in `dst_before`).
absl::StatusOr<std::vector<uint8_t>> ExpectedAfterTransfer(const KvCache& src, const std::vector<uint32_t>& blocks_src,
                                                           const kv::KvLayoutSpec& dst,
                                                           const std::vector<uint32_t>& blocks_dst,
                                                           uint64_t num_tokens, const std::string& scheme,
                                                           const std::vector<uint8_t>& dst_before, int stages = 0);

// Options of a test daemon: sockets under TEST_TMPDIR, ports picked by the kernel, no metrics HTTP.
server::DaemonOptions TestDaemonOptions(server::Role role, const std::string& name);

// A prefill and a decode daemon in this process, with a client connected to each.
struct DaemonPair {
  std::unique_ptr<server::Daemon> prefill;
  std::unique_ptr<server::Daemon> decode;
  std::unique_ptr<Client> prefill_client;
  std::unique_ptr<Client> decode_client;
};

// Starts the pair; `rate_bytes_per_second` > 0 paces the prefill side's data plane (with 16 KiB chunks, so the
// token bucket's two-chunk burst is small next to a test's transfer).
absl::StatusOr<DaemonPair> StartDaemonPair(double rate_bytes_per_second = 0);

}  // namespace kvt::e2e

#endif  // KVT_TESTS_E2E_DAEMON_PAIR_H_
