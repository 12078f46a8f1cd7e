// Options of one kvtd daemon: its role, where it listens, security, codec parallelism, the data plane's
// transport options, and limits. Plain data; kvtd_main.cc fills it from flags; Validate before use.
#ifndef KVT_SERVER_OPTIONS_H_
#define KVT_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/options.h"

namespace kvt::server {

enum class Role { kPrefill, kDecode, kBoth };

// "prefill", "decode", "both" (INVALID_ARGUMENT otherwise) and back.
absl::StatusOr<Role> ParseRole(absl::string_view name);
const char* RoleName(Role role);

struct DaemonOptions {
  Role role = Role::kBoth;
  // Names this daemon to its peers and in logs; "" = "<hostname>-<pid>". 1..128 bytes of [A-Za-z0-9._:-].
  std::string daemon_id;

  // The client service (kvt::Client, kvtctl): a unix socket path. The socket is created with
  // client_socket_mode (after umask is bypassed), so its permissions decide who may use the daemon. A stale
  // socket file left by a dead daemon is replaced; a live one makes Start fail with ALREADY_EXISTS.
  std::string client_socket = "/tmp/kvtd.sock";
  uint32_t client_socket_mode = 0660;

  // The peer service (daemon <-> daemon gRPC over TCP), "host:port"; port 0 picks a free port.
  std::string peer_listen = "0.0.0.0:7470";
  // What other daemons dial to reach this one ("host:port"); "" = peer_listen with its bound port (and
  // 127.0.0.1 when peer_listen's host is 0.0.0.0).
  std::string advertise_address;

  // Discovery (docs/DAEMON.md, "Finding peers through etcd"): etcd's client endpoints ("host:port" or
  // "http://host:port"); none = peers are named by host:port only. The daemon registers under
  // <etcd_prefix>/daemons/<daemon_id> on a lease of etcd_ttl and resolves Offer.decode_daemon ids through it.
  std::vector<std::string> etcd_endpoints;
  std::string etcd_prefix = "/kvt";
  absl::Duration etcd_ttl = absl::Seconds(10);
  // TLS to etcd: the CA of etcd's certificate; this daemon's client certificate and key (etcd --client-cert-auth).
  std::string etcd_ca_file;
  std::string etcd_cert_file;
  std::string etcd_key_file;
  // etcd user authentication (etcd with auth enabled): the user and its password (kvtd reads it from a file).
  std::string etcd_username;
  std::string etcd_password;

  // Mutual TLS between daemons when all three PEM files are given (none = plaintext). The peer service
  // requires and verifies client certificates signed by tls_ca; dialled peers are verified the same way.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // Name expected in peers' server certificates ("" = the host of the address dialled).
  std::string tls_server_name;
  // Shared secret every peer call must carry in the "kvt-token" metadata ("" = none). Compared in constant time.
  std::string peer_token;

  // Prometheus text exposition over HTTP at /metrics ("host:port"; "" = off).
  std::string metrics_listen = "127.0.0.1:9470";

  // Threads that encode and decode pages; 0 = one per available core.
  int codec_threads = 0;
  // Target tokens per page (rounded down to whole codec chunks); 0 = codec::AutoPageTokens of the region's channels.
  uint32_t page_tokens = 0;
  // Tokens per codec chunk (codec::CodecOptions::chunk_tokens): 0 = each scheme's own (codec::ResolveChunkTokens:
  // 16 for the lynx family, 32 for int8/int4).
  int chunk_tokens = 0;
  // Encoded bytes of one request held while on the wire: past this, encoding waits for the oldest layer's
  // acknowledgement. It should cover a whole request, or the last layers' anchors queue behind earlier layers'
  // residuals and time-to-anchor approaches time-to-full.
  // 4 GiB covers a 32k-token request of a Llama-8B-shaped model in int8 or lynx (2.4 GB).
  int64_t staging_bytes_per_request = int64_t{4} << 30;
  // Host buffers kept between requests for encoded layers and the decode side's layer inboxes (pinned ones for
  // GPU regions): what a daemon holds on to so that a request does not pay for allocating, faulting in and
  // pinning its memory (docs/DAEMON.md, "Buffers").
  int64_t host_buffer_pool_bytes = int64_t{4} << 30;

  // Live requests (either side) at once; more get RESOURCE_EXHAUSTED.
  int max_requests = 256;
  // Finished requests kept for Watch replay and kvtctl timeline: this many, for at most this long.
  int finished_keep = 256;
  absl::Duration finished_retention = absl::Minutes(10);
  // Bound on a dial of a peer daemon (gRPC connect + Hello + data-plane connect).
  absl::Duration peer_connect_timeout = absl::Seconds(5);

  // The data plane (rate limit, chunking, flow control, failure detection, UCX transports).
  transport::Options transport;
};

// Checks the options and fills defaults (daemon_id, codec_threads). INVALID_ARGUMENT names the bad field.
absl::StatusOr<DaemonOptions> ValidateOptions(DaemonOptions options);

// Checks an id a client or peer chose (region or request id): 1..max_bytes of [A-Za-z0-9._:/-]; `what` names
// it in the message.
absl::Status ValidateId(absl::string_view id, absl::string_view what, size_t max_bytes);

// Checks a deadline_ms field of a client or peer RPC: 1..3600000.
absl::StatusOr<absl::Duration> DeadlineFromMs(uint32_t ms, const char* field);

}  // namespace kvt::server

#endif  // KVT_SERVER_OPTIONS_H_
