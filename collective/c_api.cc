// The C ABI of c_api.h over the C++ communicators: every call catches its absl::Status at the boundary and
// returns its code, the message kept per thread.
#include "collective/c_api.h"

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/all_reduce.h"
#include "collective/c_api_support.h"
#include "collective/communicator.h"
#include "collective/cuda_communicator.h"
#include "collective/tcp_wire.h"

struct kvt_coll_comm {
  int backend = KVT_COLL_TCP;
  std::unique_ptr<kvt::collective::WireCommunicator> host;  // TCP and UCX
  std::unique_ptr<kvt::collective::CudaCommunicator> cuda;  // CUDA
  kvt::collective::Communicator& comm() const {
    return host != nullptr ? static_cast<kvt::collective::Communicator&>(*host) : *cuda;
  }
};

namespace {

using ::kvt::collective::AllReduceOptions;
using ::kvt::collective::DataType;
using ::kvt::collective::c_api::Done;
using ::kvt::collective::c_api::Fail;
using ::kvt::collective::c_api::MsOr;
using ::kvt::collective::c_api::StreamOrDefault;
using ::kvt::collective::c_api::StringOr;

absl::Status ToOptions(const kvt_coll_all_reduce_options* o, AllReduceOptions& out) {
  if (o == nullptr) return absl::OkStatus();  // the defaults
  out.step1_bits = o->step1_bits;
  out.step2_bits = o->step2_bits;
  out.group_size = o->group_size;
  out.spike_reserve = o->spike_reserve != 0;
  if (o->chunk_bytes != 0) out.chunk_bytes = o->chunk_bytes;
  out.timeout = MsOr(o->timeout_ms, absl::Seconds(30));
  return kvt::collective::ValidateAllReduceOptions(out);
}

// The one-shot threshold for a world (docs/COLLECTIVES.md, "Small calls": an estimate from the bytes each round
// moves, not yet measured beside the two-step round on several GPUs), lowered to what a workspace of `workspace`
// bytes leaves room for (CudaCommunicatorOptions::one_shot_bytes: the region may take half of it).
int64_t DefaultOneShotBytes(int world, uint64_t workspace) {
  const int64_t measured = world <= 4 ? int64_t{1} << 20 : int64_t{512} << 10;
  const int64_t fits = static_cast<int64_t>(workspace / 4 / static_cast<uint64_t>(std::max(world, 1))) - (int64_t{64} << 10);
  return std::max<int64_t>(0, std::min(measured, fits)) / 256 * 256;
}

absl::Status Create(const kvt_coll_config& c, std::unique_ptr<kvt_coll_listener> listener,
                    std::unique_ptr<kvt_coll_comm>& out) {
  using ::kvt::collective::CudaCommunicator;
  using ::kvt::collective::CudaCommunicatorOptions;
  using ::kvt::collective::TcpWire;
  using ::kvt::collective::WireCommunicator;
  if (absl::Status s = kvt::collective::c_api::CheckConfig(c); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<TcpWire>> wire = kvt::collective::c_api::BootstrapWire(c, std::move(listener));
  if (!wire.ok()) return wire.status();
  auto comm = std::make_unique<kvt_coll_comm>();
  comm->backend = c.backend;
  if (c.backend != KVT_COLL_CUDA) {
    absl::StatusOr<std::unique_ptr<kvt::collective::CollectiveWire>> host_wire =
        kvt::collective::c_api::HostWire(c, *std::move(wire));
    if (!host_wire.ok()) return host_wire.status();
    absl::StatusOr<std::unique_ptr<WireCommunicator>> host = WireCommunicator::Create(*std::move(host_wire));
    if (!host.ok()) return host.status();
    comm->host = *std::move(host);
  } else {
    CudaCommunicatorOptions options;
    options.device = c.device;
    if (c.workspace_bytes != 0) options.workspace_bytes = c.workspace_bytes;
    options.bootstrap_timeout = MsOr(c.bootstrap_timeout_ms, absl::Seconds(30));
    options.nccl_library = StringOr(c.nccl_library);
    if (c.one_shot_bytes < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.one_shot_bytes must be -1 (the default), 0 (never) or a byte count, got ",
                       c.one_shot_bytes));
    }
    options.one_shot_bytes = static_cast<size_t>(
        c.one_shot_bytes == -1 ? DefaultOneShotBytes((*wire)->world_size(), options.workspace_bytes)
                               : c.one_shot_bytes);
    absl::StatusOr<std::unique_ptr<CudaCommunicator>> cuda = CudaCommunicator::Create(*std::move(wire), options);
    if (!cuda.ok()) return cuda.status();
    comm->cuda = *std::move(cuda);
  }
  out = std::move(comm);
  return absl::OkStatus();
}

}  // namespace

extern "C" {

uint32_t kvt_coll_abi_version(void) { return KVT_COLL_ABI_VERSION; }

int64_t kvt_coll_default_one_shot_bytes(int32_t world, uint64_t workspace_bytes) {
  return DefaultOneShotBytes(world, workspace_bytes == 0 ? uint64_t{256} << 20 : workspace_bytes);
}

const char* kvt_coll_last_error(void) { return kvt::collective::c_api::LastError(); }

int kvt_coll_listen(const char* host, kvt_coll_listener** out, int32_t* port) {
  if (host == nullptr || out == nullptr || port == nullptr) {
    return Fail(absl::InvalidArgumentError("kvt_coll_listen: host, out and port must not be NULL"));
  }
  absl::StatusOr<kvt::collective::TcpListener> l = kvt::collective::TcpListener::Listen(absl::StrCat(host, ":0"));
  if (!l.ok()) return Fail(l.status());
  *port = l->port();
  *out = new kvt_coll_listener{*std::move(l)};
  return Done(absl::OkStatus());
}

void kvt_coll_listener_close(kvt_coll_listener* listener) { delete listener; }

int kvt_coll_create(const kvt_coll_config* config, kvt_coll_comm** out) {
  // A config of another layout is not read past its version (its listener field may be elsewhere).
  const bool readable = config != nullptr && config->abi_version == KVT_COLL_ABI_VERSION;
  std::unique_ptr<kvt_coll_listener> listener(readable ? config->listener : nullptr);
  if (config == nullptr || out == nullptr) {
    return Fail(absl::InvalidArgumentError("kvt_coll_create: config and out must not be NULL"));
  }
  *out = nullptr;
  std::unique_ptr<kvt_coll_comm> comm;
  const absl::Status status = Create(*config, std::move(listener), comm);
  if (status.ok()) *out = comm.release();
  return Done(status);
}

void kvt_coll_destroy(kvt_coll_comm* comm) { delete comm; }

int32_t kvt_coll_rank(const kvt_coll_comm* comm) { return comm == nullptr ? -1 : comm->comm().rank(); }
int32_t kvt_coll_world_size(const kvt_coll_comm* comm) { return comm == nullptr ? -1 : comm->comm().world_size(); }
int32_t kvt_coll_device(const kvt_coll_comm* comm) {
  return comm == nullptr || comm->cuda == nullptr ? -1 : comm->cuda->device();
}

int kvt_coll_all_reduce(kvt_coll_comm* comm, const void* in, void* out, uint64_t count, int32_t dtype,
                        const kvt_coll_all_reduce_options* options, void* stream) {
  if (comm == nullptr) return Fail(absl::InvalidArgumentError("kvt_coll_all_reduce: comm is NULL"));
  if (dtype != KVT_COLL_F32 && dtype != KVT_COLL_BF16 && dtype != KVT_COLL_F16) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("dtype must be KVT_COLL_F32 (0), KVT_COLL_BF16 (1) or KVT_COLL_F16 (2), got ", dtype)));
  }
  if (count > 0 && (in == nullptr || out == nullptr)) {
    return Fail(absl::InvalidArgumentError("kvt_coll_all_reduce: in and out must not be NULL"));
  }
  AllReduceOptions o;
  if (absl::Status s = ToOptions(options, o); !s.ok()) return Fail(s);
  if (comm->cuda != nullptr) {
    return Done(comm->cuda->AllReduceAsync(in, out, count, static_cast<DataType>(dtype), o, StreamOrDefault(stream)));
  }
  if (dtype != KVT_COLL_F32) {
    return Fail(absl::InvalidArgumentError(
        "the TCP and UCX backends reduce fp32 host buffers only: convert, or use the CUDA backend for bf16/fp16"));
  }
  return Done(comm->host->AllReduce(absl::MakeConstSpan(static_cast<const float*>(in), count),
                                    absl::MakeSpan(static_cast<float*>(out), count), o));
}

int kvt_coll_synchronize(kvt_coll_comm* comm, void* stream, uint32_t timeout_ms) {
  if (comm == nullptr) return Fail(absl::InvalidArgumentError("kvt_coll_synchronize: comm is NULL"));
  if (comm->cuda == nullptr) return Done(absl::OkStatus());
  return Done(comm->cuda->Synchronize(StreamOrDefault(stream), absl::Now() + MsOr(timeout_ms, absl::Seconds(30))));
}

}  // extern "C"
