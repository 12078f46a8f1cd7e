#include "collective/c_api_support.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/ucx_wire.h"

namespace kvt::collective::c_api {
namespace {

thread_local std::string last_error;

// cudaStreamLegacy's value (cuda_runtime_api.h), without the CUDA headers.
void* const kLegacyDefaultStream = reinterpret_cast<void*>(0x1);

}  // namespace

int Fail(const absl::Status& status) {
  last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

int Done(const absl::Status& status) {
  if (status.ok()) {
    last_error.clear();
    return 0;
  }
  return Fail(status);
}

const char* LastError() { return last_error.c_str(); }

absl::Duration MsOr(uint32_t ms, absl::Duration fallback) { return ms == 0 ? fallback : absl::Milliseconds(ms); }

std::string StringOr(const char* s) { return s == nullptr ? std::string() : std::string(s); }

void* StreamOrDefault(void* stream) { return stream != nullptr ? stream : kLegacyDefaultStream; }

absl::Status CheckConfig(const kvt_coll_config& c) {
  if (c.abi_version != KVT_COLL_ABI_VERSION) {
    return absl::InvalidArgumentError(absl::StrCat("config.abi_version is ", c.abi_version, "; this library is ",
                                                   KVT_COLL_ABI_VERSION, ": rebuild the caller against its c_api.h"));
  }
  if (c.backend != KVT_COLL_TCP && c.backend != KVT_COLL_UCX && c.backend != KVT_COLL_CUDA) {
    return absl::InvalidArgumentError(absl::StrCat("config.backend must be KVT_COLL_TCP (0), KVT_COLL_UCX (1) or "
                                                   "KVT_COLL_CUDA (2), got ", c.backend));
  }
  if (c.peers == nullptr) return absl::InvalidArgumentError("config.peers is NULL: give every rank's host:port");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TcpWire>> BootstrapWire(const kvt_coll_config& c,
                                                       std::unique_ptr<kvt_coll_listener> listener) {
  absl::StatusOr<std::vector<std::string>> peers = ParsePeerList(c.peers);
  if (!peers.ok()) return peers.status();
  if (c.rank < 0 || static_cast<size_t>(c.rank) >= peers->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.rank is ", c.rank, " but peers names ", peers->size(), " ranks"));
  }
  TcpWireOptions tcp{.rank = c.rank,
                     .peers = *std::move(peers),
                     .bootstrap_timeout = MsOr(c.bootstrap_timeout_ms, absl::Seconds(30))};
  return listener != nullptr ? TcpWire::Create(tcp, std::move(listener->listener)) : TcpWire::Create(tcp);
}

absl::StatusOr<std::unique_ptr<CollectiveWire>> HostWire(const kvt_coll_config& c, std::unique_ptr<TcpWire> tcp) {
  if (c.backend == KVT_COLL_TCP) return std::unique_ptr<CollectiveWire>(std::move(tcp));
  // UCX: the TCP mesh carries the worker-address exchange only.
  absl::StatusOr<std::unique_ptr<UcxWire>> ucx =
      UcxWire::Create({.tls = StringOr(c.ucx_tls),
                       .net_devices = StringOr(c.ucx_net_devices),
                       .bootstrap_timeout = MsOr(c.bootstrap_timeout_ms, absl::Seconds(30))},
                      *tcp);
  if (!ucx.ok()) return ucx.status();
  return std::unique_ptr<CollectiveWire>(*std::move(ucx));
}

}  // namespace kvt::collective::c_api
