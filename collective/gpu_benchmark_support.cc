#include "collective/gpu_benchmark_support.h"

#include <utility>

#include "absl/time/time.h"
#include "common/cuda_util.h"
#include "common/cuda_ipc.h"

namespace kvt::collective {

absl::StatusOr<BenchmarkRank> StartBenchmarkRank(ForkedRank& self, int world, const std::string& nccl_path) {
  BenchmarkRank out;
  absl::StatusOr<std::unique_ptr<TcpWire>> wire = TcpWire::Create(
      {.rank = self.rank, .peers = self.peers, .bootstrap_timeout = absl::Seconds(60)}, std::move(self.listener));
  if (!wire.ok()) return wire.status();
  out.wire = *std::move(wire);
  if (absl::Status s = UseCudaDevice(self.rank); !s.ok()) return s;
  if (!nccl_path.empty()) {
    absl::StatusOr<std::unique_ptr<NcclLibrary>> lib = NcclLibrary::Load(nccl_path);
    if (!lib.ok()) return lib.status();
    out.library = *std::move(lib);
    absl::StatusOr<std::unique_ptr<NcclComm>> comm =
        out.library->InitOverWire(*out.wire, absl::Now() + absl::Seconds(60));
    if (!comm.ok()) return comm.status();
    out.comm = *std::move(comm);
  }
  if (self.rank == 0) {
    absl::StatusOr<std::string> desc = ::kvt::CudaDeviceDescription();
    std::printf("device: %d x %s\n", world, desc.ok() ? desc->c_str() : desc.status().ToString().c_str());
    if (out.library) std::printf("NCCL %s from %s\n", out.library->Version().c_str(), nccl_path.c_str());
    std::fflush(stdout);
  }
  return out;
}

int GpusForBenchmark() {
  const int gpus = ::kvt::CudaDeviceCountInChild();
  if (gpus == 0) {
    std::fprintf(stderr, "no CUDA device here: this benchmark needs GPUs (tools/gpu/run_gpu_collectives.sh)\n");
  }
  return gpus;
}

}  // namespace kvt::collective
