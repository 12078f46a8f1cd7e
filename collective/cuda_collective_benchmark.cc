// The CUDA AllReduce beside NCCL's, in one run on the GPUs of one host (docs/RESULTS.md: collectives
// against NCCL). One forked process per GPU; each rank times every mode at every size with CUDA events on one
// stream (after warm-up), and the parent prints the slowest rank's time as algorithmic bandwidth (bytes of
// the bf16 buffer / time) and as a ratio to NCCL's bf16 AllReduce of the same buffer. Then it reports each
// width's relative error on activations with outliers against the float64 sum.
//
//   cuda_collective_benchmark --nccl_lib=/path/libnccl.so.2 [--world=N] [--sizes_mib=1,4,...] [--modes=...]
//
// The parent never touches CUDA (a child forked after that could not use it); it counts GPUs in a child.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cuda_util.h"
#include "numerics/float16.h"
#include "collective/all_reduce_testing.h"
#include "collective/cuda_communicator.h"
#include "collective/gpu_benchmark_support.h"
#include "collective/multi_process_testing.h"
#include "collective/nccl_library.h"
#include "collective/tcp_wire.h"

ABSL_FLAG(std::string, nccl_lib, "", "libnccl.so.2 to compare with (empty: no NCCL column)");
ABSL_FLAG(int, world, 0, "ranks, one GPU each (0: every GPU)");
ABSL_FLAG(std::string, sizes_mib, "1,4,16,64,256,1024", "bf16 buffer sizes, MiB");
ABSL_FLAG(std::string, modes, "raw,8,6,5,4,3,2s,4/8",
          "kvt widths: raw (unquantized), N (N/N), Ns (spikes), A/B; a trailing p (4p, 2sp): plain kernel launches");
ABSL_FLAG(std::string, routed_modes, "raw,rawc,8,4",
          "modes also run with the communicator's default NCCL routing (nccl_routing.h), as 'auto ...' columns; "
          "a trailing 'c' adds the routed calls' finiteness check (NcclRouting::check_finite); needs --nccl_lib");
ABSL_FLAG(int, group_size, 128, "quantization group");
ABSL_FLAG(int, chunk_mib, 1, "AllReduceOptions::chunk_bytes of kvt's modes, MiB of fp32 (1: the library default)");
ABSL_FLAG(int, accuracy_mib, 16, "bf16 MiB for the accuracy table (0: skip)");
ABSL_FLAG(double, seconds_per_point, 0.05, "timed seconds per (size, mode), at least 5 iterations");

namespace kvt::collective {
namespace {

namespace ff = ::kvt::numerics;

struct Mode {
  std::string name;
  bool nccl = false;
  AllReduceOptions options;
  bool routed = false;  // through CudaCommunicator with its default NcclRouting
  bool check_finite = false;  // of that routing
  bool early_launch = true;   // CudaCommunicator::set_early_launch; a trailing 'p' in a mode: plain launches
};

absl::StatusOr<std::vector<Mode>> ParseModes(const std::string& spec, const std::string& routed_spec,
                                             bool with_nccl) {
  std::vector<Mode> modes;
  if (with_nccl) modes.push_back({"nccl bf16", true, {}});
  std::vector<std::pair<absl::string_view, bool>> specs;
  for (absl::string_view m : absl::StrSplit(spec, ',', absl::SkipEmpty())) specs.push_back({m, false});
  if (with_nccl) {
    for (absl::string_view m : absl::StrSplit(routed_spec, ',', absl::SkipEmpty())) specs.push_back({m, true});
  }
  for (auto [m, routed] : specs) {
    Mode mode;
    mode.routed = routed;
    if (routed && !m.empty() && m.back() == 'c') {
      mode.check_finite = true;
      m.remove_suffix(1);
    }
    mode.options.group_size = absl::GetFlag(FLAGS_group_size);
    mode.options.chunk_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_chunk_mib)) << 20;
    mode.options.timeout = absl::Seconds(20);
    if (m == "raw") {
      mode.name = "kvt bf16";
      mode.options.step1_bits = mode.options.step2_bits = 0;
    } else {
      std::string s(m);
      if (!routed && !s.empty() && s.back() == 'p') {
        mode.early_launch = false;
        s.pop_back();
      }
      if (!s.empty() && s.back() == 's') {
        mode.options.spike_reserve = true;
        s.pop_back();
      }
      std::vector<std::string> parts = absl::StrSplit(s, '/');
      int a = 0, b = 0;
      if (parts.empty() || parts.size() > 2 || !absl::SimpleAtoi(parts[0], &a) ||
          !absl::SimpleAtoi(parts.back(), &b)) {
        return absl::InvalidArgumentError(absl::StrCat("bad mode '", m, "'"));
      }
      mode.options.step1_bits = a;
      mode.options.step2_bits = b;
      mode.name = absl::StrCat("INT", m);
    }
    if (routed) {
      mode.name = absl::StrCat("auto ", mode.name == "kvt bf16" ? "bf16" : mode.name,
                               mode.check_finite ? " checked" : "");
    }
    modes.push_back(mode);
  }
  return modes;
}

// Rank r's activations: RandomWithOutliers (N(0.3, 1.5), 0.1% of values x100) rounded to bf16.
std::vector<uint16_t> Activations(size_t n, int rank) {
  const std::vector<float> x = RandomWithOutliers(n, 1000 + rank);
  std::vector<uint16_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = ff::FloatToBf16(x[i]);
  return b;
}

// One rank: per (size, mode) a record {microseconds per call}; then per quantized mode a record of rank 0's
// output of the accuracy run.
int RunRank(ForkedRank& self, int world, const std::vector<size_t>& sizes, const std::vector<Mode>& modes) {
  absl::StatusOr<BenchmarkRank> started = StartBenchmarkRank(self, world, absl::GetFlag(FLAGS_nccl_lib));
  BENCH_CHECK(started.status());
  NcclComm* const nccl_comm = started->comm.get();
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  // Unquantized bf16 needs the buffer's bytes in each of the two step areas.
  // kvt's own columns run with routing off; the "auto" columns switch to the default routing for their calls.
  auto comm = CudaCommunicator::Create(std::move(started->wire), {.device = self.rank,
                                                                   .workspace_bytes = 2 * max_bytes + (64 << 20),
                                                                   .nccl_library = absl::GetFlag(FLAGS_nccl_lib),
                                                                   .nccl_routing = NcclRouting::Off()});
  BENCH_CHECK(comm.status());
  CudaCommunicator& kvt = **comm;
  auto in = DeviceBuffer::Create(max_bytes);
  BENCH_CHECK(in.status());
  auto out = DeviceBuffer::Create(max_bytes);
  BENCH_CHECK(out.status());
  {  // Fill with activations: 8M distinct values, tiled.
    const size_t tile = std::min<size_t>(max_bytes / 2, size_t{8} << 20);
    const std::vector<uint16_t> a = Activations(tile, self.rank);
    for (size_t at = 0; at < max_bytes; at += tile * 2) {
      BENCH_CHECK(::kvt::CopyToDevice(static_cast<char*>((*in)->get()) + at, a.data(),
                                           std::min(tile * 2, max_bytes - at)));
    }
  }
  void* const stream = kvt.stream();
  auto timer = CudaEventTimer::Create();
  BENCH_CHECK(timer.status());
  const auto run_once = [&](const Mode& mode, size_t count) -> absl::Status {
    if (mode.nccl) return nccl_comm->AllReduce((*in)->get(), (*out)->get(), count, NcclType::kBfloat16, stream);
    kvt.set_nccl_routing(mode.routed ? NcclRouting{.check_finite = mode.check_finite} : NcclRouting::Off());
    kvt.set_early_launch(mode.early_launch);
    return kvt.AllReduceAsync((*in)->get(), (*out)->get(), count, DataType::kBfloat16, mode.options, stream);
  };
  const double target_s = absl::GetFlag(FLAGS_seconds_per_point);
  for (size_t bytes : sizes) {
    const size_t count = bytes / 2;
    for (const Mode& mode : modes) {
      // Warm up, and estimate the iterations for about target_s.
      for (int i = 0; i < 2; ++i) BENCH_CHECK(run_once(mode, count));
      BENCH_CHECK(kvt.Synchronize(stream, absl::Now() + absl::Seconds(60)));
      BENCH_CHECK((*timer)->Start(CudaStream{stream}));
      BENCH_CHECK(run_once(mode, count));
      BENCH_CHECK((*timer)->Stop(CudaStream{stream}));
      auto once = (*timer)->ElapsedMs();
      BENCH_CHECK(once.status());
      // Every rank must run the same number of iterations: each proposes one from its own time, and all take
      // the mean of the proposals (a one-value unquantized AllReduce, identical on every rank).
      float iters_f = static_cast<float>(std::clamp(target_s * 1e3 / std::max(*once, 1e-3f), 5.0, 2000.0));
      float agreed = 0;
      kvt.set_nccl_routing(NcclRouting::Off());
      BENCH_CHECK(kvt.AllReduce(absl::MakeSpan(&iters_f, 1), absl::MakeSpan(&agreed, 1),
                                {.step1_bits = 0, .step2_bits = 0, .group_size = 16}));
      const int iters = static_cast<int>(agreed / world);
      BENCH_CHECK((*timer)->Start(CudaStream{stream}));
      for (int i = 0; i < iters; ++i) BENCH_CHECK(run_once(mode, count));
      BENCH_CHECK((*timer)->Stop(CudaStream{stream}));
      auto ms = (*timer)->ElapsedMs();
      BENCH_CHECK(ms.status());
      BENCH_CHECK(kvt.Synchronize(stream, absl::Now() + absl::Seconds(60)));
      const float us = *ms * 1e3f / iters;
      self.records.Write(absl::OkStatus(), {us});
      if (self.rank == 0) {
        const char* path = mode.nccl ? "" : AllReducePathName(kvt.PathOf(count, DataType::kBfloat16, mode.options));
        std::fprintf(stderr, "  %6zu MiB %-10s %10.1f us  %7.1f GB/s (rank 0, %d iterations) %s\n", bytes >> 20,
                     mode.name.c_str(), us, bytes / (us * 1e3), iters, path);
      }
    }
  }
  // Accuracy: rank 0's output of each mode on the first accuracy_mib of the activations.
  const size_t acc_count = static_cast<size_t>(absl::GetFlag(FLAGS_accuracy_mib)) << 19;
  if (acc_count > 0 && acc_count * 2 <= max_bytes) {
    for (const Mode& mode : modes) {
      BENCH_CHECK(run_once(mode, acc_count));
      BENCH_CHECK(kvt.Synchronize(stream, absl::Now() + absl::Seconds(60)));
      std::vector<uint16_t> got(acc_count);
      BENCH_CHECK(::kvt::CopyToHost(got.data(), (*out)->get(), acc_count * 2));
      std::vector<float> values;
      if (self.rank == 0) {
        values.resize(acc_count);
        for (size_t i = 0; i < acc_count; ++i) values[i] = ff::Bf16ToFloat(got[i]);
      }
      self.records.Write(absl::OkStatus(), values);
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int gpus = GpusForBenchmark();
  if (gpus == 0) return 1;
  const int world = absl::GetFlag(FLAGS_world) > 0 ? absl::GetFlag(FLAGS_world) : gpus;
  if (world > gpus) {
    std::fprintf(stderr, "--world=%d but only %d GPUs\n", world, gpus);
    return 1;
  }
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',', absl::SkipEmpty())) {
    int mib = 0;
    if (!absl::SimpleAtoi(s, &mib) || mib <= 0) {
      std::fprintf(stderr, "bad --sizes_mib entry '%s'\n", std::string(s).c_str());
      return 1;
    }
    sizes.push_back(static_cast<size_t>(mib) << 20);
  }
  absl::StatusOr<std::vector<Mode>> modes = ParseModes(absl::GetFlag(FLAGS_modes), absl::GetFlag(FLAGS_routed_modes),
                                                       !absl::GetFlag(FLAGS_nccl_lib).empty());
  if (!modes.ok()) {
    std::fprintf(stderr, "%s\n", modes.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "%d ranks, %zu sizes, %zu modes\n", world, sizes.size(), modes->size());
  ForkedRun run = RunForked(world, absl::Minutes(9), [&](ForkedRank& self) { return RunRank(self, world, sizes, *modes); });
  for (const absl::Status& exit : run.exits) {
    if (!exit.ok()) std::fprintf(stderr, "%s\n", exit.ToString().c_str());
  }
  const size_t points = sizes.size() * modes->size();
  for (int r = 0; r < world; ++r) {
    if (run.records[r].size() < points) {
      std::fprintf(stderr, "rank %d wrote %zu of %zu timings\n", r, run.records[r].size(), points);
      return 1;
    }
  }
  // Slowest rank per point.
  std::printf("\nAllReduce of a bf16 buffer, %d GPUs: algorithmic bandwidth GB/s (bytes / time of the slowest rank)", world);
  const bool has_nccl = (*modes)[0].nccl;
  std::printf("%s\n\n", has_nccl ? ", and x NCCL" : "");
  if (has_nccl) std::printf("auto columns: CudaCommunicator's default routing (%s)\n\n", DescribeRouting({}).c_str());
  std::vector<std::string> header = {"size"};
  for (const Mode& m : *modes) header.push_back(m.name);
  std::printf("| %s |\n", absl::StrJoin(header, " | ").c_str());
  std::string rule = "| ---";
  for (size_t i = 1; i < header.size(); ++i) rule += " | ---:";
  std::printf("%s |\n", rule.c_str());
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<std::string> row = {absl::StrFormat("%d MiB", sizes[s] >> 20)};
    double nccl_us = 0;
    for (size_t m = 0; m < modes->size(); ++m) {
      double us = 0;
      for (int r = 0; r < world; ++r) us = std::max<double>(us, run.records[r][s * modes->size() + m].values[0]);
      const double gbs = sizes[s] / (us * 1e3);
      if ((*modes)[m].nccl) {
        nccl_us = us;
        row.push_back(absl::StrFormat("%.1f (%.0f us)", gbs, us));
      } else if (has_nccl) {
        row.push_back(absl::StrFormat("%.1f (%.2fx)", gbs, nccl_us / us));
      } else {
        row.push_back(absl::StrFormat("%.1f", gbs));
      }
    }
    std::printf("| %s |\n", absl::StrJoin(row, " | ").c_str());
  }
  // Accuracy against the float64 sum of the bf16 inputs.
  const size_t acc_count = static_cast<size_t>(absl::GetFlag(FLAGS_accuracy_mib)) << 19;
  if (acc_count > 0 && run.records[0].size() == points + modes->size()) {
    std::vector<double> sum(acc_count, 0.0);
    const size_t tile = std::min<size_t>(*std::max_element(sizes.begin(), sizes.end()) / 2, size_t{8} << 20);
    for (int r = 0; r < world; ++r) {
      const std::vector<uint16_t> a = Activations(tile, r);
      for (size_t i = 0; i < acc_count; ++i) sum[i] += ff::Bf16ToFloat(a[i % tile]);
    }
    double norm = 0, peak = 0;
    for (double v : sum) {
      norm += v * v;
      peak = std::max(peak, std::fabs(v));
    }
    std::printf("\nAccuracy on %zu activations per rank (N(0.3, 1.5), 0.1%% x100 outliers, bf16), against the float64 sum:\n\n",
                acc_count);
    std::printf("| mode | relative L2 error | max abs error / max |sum| |\n| --- | ---: | ---: |\n");
    for (size_t m = 0; m < modes->size(); ++m) {
      const std::vector<float>& got = run.records[0][points + m].values;
      double err = 0, worst = 0;
      for (size_t i = 0; i < acc_count; ++i) {
        const double d = got[i] - sum[i];
        err += d * d;
        worst = std::max(worst, std::fabs(d));
      }
      std::printf("| %s | %.2e | %.2e |\n", (*modes)[m].name.c_str(), std::sqrt(err / norm), worst / peak);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvt::collective

int main(int argc, char** argv) { return kvt::collective::Main(argc, argv); }
