#include "tests/e2e/daemon_pair.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "common/status_macros.h"
#include "kv/float16.h"
#include "kv/kv_page_io.h"
#include "kv/layout_proto.h"
#include "kv/reference_transfer.h"
#include "proto/kvt/v1/layout.pb.h"

namespace kvt::e2e {
namespace {

std::atomic<int> next_segment{0};

}  // namespace

v1::KvLayout KvCache::proto() const { return kv::LayoutToProto(spec); }

kv::KvLayoutSpec DenseLayout(uint32_t layers, uint32_t blocks, uint32_t block_tokens, uint32_t heads,
                                 uint32_t head_dim, kv::KvDType dtype, kv::BlockOrder order,
                                 uint32_t head_begin, uint32_t total_heads) {
  kv::KvLayoutSpec s = kv::DenseLayoutSpec(layers, blocks, block_tokens, heads, head_dim, dtype, order);
  s.head_begin = head_begin;
  s.total_kv_heads = total_heads;
  return s;
}

absl::StatusOr<KvCache> MakeKvCache(const kv::KvLayoutSpec& spec, uint32_t seed, bool fill) {
  KvCache cache;
  cache.spec = spec;
  const uint64_t bytes = spec.layer_stride_bytes * spec.num_layers;
  KVT_ASSIGN_OR_RETURN(cache.memory, client::ShmSegment::Create(
                                         absl::StrCat("/kvt-e2e-", getpid(), "-", absl::ToUnixNanos(absl::Now()), "-", next_segment++), bytes));
  if (!fill) return cache;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t values = bytes / kv::DTypeBytes(spec.dtype);
  const uint32_t channels = spec.num_kv_heads * spec.head_dim;
  std::vector<float> scale(channels);
  for (uint32_t c = 0; c < channels; ++c) scale[c] = (c % 37 == 5) ? 20.0f : 0.5f + 0.05f * (c % 11);
  std::vector<float> v(values);
  for (size_t i = 0; i < values; ++i) v[i] = normal(rng) * scale[(i / 1) % channels];
  uint8_t* out = cache.memory->data();
  switch (spec.dtype) {
    case kv::KvDType::kBfloat16:
      kv::FloatToBf16(v.data(), values, out);
      break;
    case kv::KvDType::kFloat16:
      kv::FloatToFp16(v.data(), values, out);
      break;
    case kv::KvDType::kFloat32:
      std::memcpy(out, v.data(), values * sizeof(float));
      break;
  }
  return cache;
}

absl::StatusOr<std::vector<uint8_t>> ExpectedAfterTransfer(const KvCache& src, const std::vector<uint32_t>& blocks_src,
                                                           const kv::KvLayoutSpec& dst,
                                                           const std::vector<uint32_t>& blocks_dst,
                                                           uint64_t num_tokens, const std::string& scheme_name,
                                                           const std::vector<uint8_t>& dst_before, int stages) {
  KVT_ASSIGN_OR_RETURN(kv::KvLayout src_layout, kv::KvLayout::Create(src.spec, src.memory->size()));
  KVT_ASSIGN_OR_RETURN(kv::KvLayout dst_layout, kv::KvLayout::Create(dst, dst_before.size()));
  kv::ReferenceTransfer t;
  t.src_layout = &src_layout;
  t.src = absl::MakeConstSpan(src.memory->data(), src.memory->size());
  t.src_blocks = blocks_src;
  t.dst_layout = &dst_layout;
  t.dst_blocks = blocks_dst;
  t.num_tokens = num_tokens;
  KVT_ASSIGN_OR_RETURN(t.scheme, codec::ParseScheme(scheme_name));
  t.stages = stages;
  std::vector<uint8_t> expected = dst_before;
  KVT_RETURN_IF_ERROR(kv::ApplyReferenceTransfer(t, absl::MakeSpan(expected)));
  return expected;
}

server::DaemonOptions TestDaemonOptions(server::Role role, const std::string& name) {
  server::DaemonOptions o;
  o.role = role;
  o.daemon_id = name;
  // TEST_TMPDIR paths are often longer than a unix socket address allows (108 bytes).
  // Test sandboxes run in a PID namespace, so the pid alone does not make a name unique across runs.
  o.client_socket = absl::StrCat("/tmp/kvt-test-", getpid(), "-", absl::ToUnixNanos(absl::Now()) % 1000000000, "-",
                                 next_segment++, "-", name, ".sock");
  o.peer_listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.codec_threads = 2;
  o.transport.ucx_tls = "tcp";
  o.transport.ucx_net_devices = "lo";
  return o;
}

absl::StatusOr<DaemonPair> StartDaemonPair(double rate_bytes_per_second) {
  server::DaemonOptions p = TestDaemonOptions(server::Role::kPrefill, "prefill");
  server::DaemonOptions d = TestDaemonOptions(server::Role::kDecode, "decode");
  p.transport.rate_bytes_per_second = rate_bytes_per_second;
  if (rate_bytes_per_second > 0) {
    p.transport.chunk_bytes = 16 << 10;
    d.transport.chunk_bytes = 16 << 10;
  }
  DaemonPair pair;
  KVT_ASSIGN_OR_RETURN(pair.prefill, server::Daemon::Start(p));
  KVT_ASSIGN_OR_RETURN(pair.decode, server::Daemon::Start(d));
  ClientOptions co;
  co.socket = pair.prefill->client_socket();
  KVT_ASSIGN_OR_RETURN(pair.prefill_client, Client::Connect(co));
  co.socket = pair.decode->client_socket();
  KVT_ASSIGN_OR_RETURN(pair.decode_client, Client::Connect(co));
  return pair;
}

}  // namespace kvt::e2e
