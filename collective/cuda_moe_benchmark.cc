// MoE Dispatch + Combine on the GPUs of one host (CudaExpertAllToAll) beside NCCL's all-to-all of the same bytes,
// in one run (docs/RESULTS.md). One forked process per GPU; each rank times, with CUDA events on one stream
// after warm-up, loops of Dispatch alone, Combine alone and Dispatch + Combine, and NCCL all-to-alls that move the
// same bytes per rank as kvt's Dispatch (FP8 records) and Combine (bf16 rows), spread evenly over the peers. The
// parent prints the slowest rank's time per call.
//
//   cuda_moe_benchmark --nccl_lib=/path/libnccl.so.2 [--worlds=2,4] [--tokens=128 --hidden=7168 --topk=8
//                      --experts=256] [--iters=200]
//
// The parent never touches CUDA (a child forked after that could not use it); it counts GPUs in a child.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/cuda_util.h"
#include "numerics/float16.h"
#include "collective/cuda_expert_all_to_all.h"
#include "collective/moe_testing.h"
#include "collective/gpu_benchmark_support.h"
#include "collective/multi_process_testing.h"
#include "collective/nccl_library.h"
#include "collective/tcp_wire.h"

ABSL_FLAG(std::string, nccl_lib, "", "libnccl.so.2 to compare with (empty: no NCCL columns)");
ABSL_FLAG(std::string, worlds, "", "world sizes to run, one GPU per rank (empty: every GPU)");
ABSL_FLAG(int, tokens, 128, "tokens per rank");
ABSL_FLAG(int, hidden, 7168, "token width");
ABSL_FLAG(int, topk, 8, "experts per token");
ABSL_FLAG(int, experts, 256, "experts in all");
ABSL_FLAG(int, iters, 200, "timed calls per loop");
ABSL_FLAG(bool, plain_launches, false, "launch the receive kernels plainly (CudaMoeCallOptions::early_launch off)");

namespace kvt::collective {
namespace {

namespace ff = ::kvt::numerics;

// What each rank records, in this order (microseconds per call).
enum Column { kDispatch, kCombine, kBoth, kNcclDispatch, kNcclCombine, kNcclBf16Dispatch, kColumns };
const char* const kColumnNames[kColumns] = {"kvt Dispatch (FP8)", "kvt Combine (bf16)", "kvt Dispatch + Combine",
                                            "NCCL a2a, Dispatch's bytes", "NCCL a2a, Combine's bytes",
                                            "NCCL a2a, bf16 tokens"};

absl::StatusOr<void*> Upload(std::vector<std::unique_ptr<DeviceBuffer>>& keep, const void* data, size_t bytes) {
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> b = DeviceBuffer::Create(std::max<size_t>(bytes, 16));
  if (!b.ok()) return b.status();
  if (data != nullptr) {
    if (absl::Status s = ::kvt::CopyToDevice((*b)->get(), data, bytes); !s.ok()) return s;
  } else if (absl::Status s = ::kvt::FillDevice((*b)->get(), 0, bytes); !s.ok()) {
    return s;
  }
  // The copy is asynchronous on the default stream, which the exchange's stream does not wait for.
  if (absl::Status s = ::kvt::Synchronize(); !s.ok()) return s;
  keep.push_back(*std::move(b));
  return keep.back()->get();
}

// One rank: a record of kColumns times (0 where NCCL is absent) and the rows it sent.
int RunRank(ForkedRank& self, int world) {
  const int tokens = absl::GetFlag(FLAGS_tokens), hidden = absl::GetFlag(FLAGS_hidden);
  const int topk = absl::GetFlag(FLAGS_topk), experts = absl::GetFlag(FLAGS_experts);
  const int iters = absl::GetFlag(FLAGS_iters);
  absl::StatusOr<BenchmarkRank> started = StartBenchmarkRank(self, world, absl::GetFlag(FLAGS_nccl_lib));
  BENCH_CHECK(started.status());
  NcclComm* const nccl_comm = started->comm.get();
  auto made = CudaExpertAllToAll::Create(std::move(started->wire), {.device = self.rank,
                                                            .hidden = hidden,
                                                            .topk = topk,
                                                            .num_experts = experts,
                                                            .max_tokens = tokens,
                                                            .type = DataType::kBfloat16,
                                                            .quant = DispatchQuant::kFp8});
  BENCH_CHECK(made.status());
  CudaExpertAllToAll& a2a = **made;
  // Routed tokens (bf16, 0.1% outliers), uniform distinct experts; rows sent = distinct ranks per token.
  const MoeRankData data = RandomMoeRankData(tokens, hidden, topk, experts, 500 + self.rank);
  std::vector<uint16_t> bf16(data.tokens.size());
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = ff::FloatToBf16(data.tokens[i]);
  const int per_rank = experts / world;
  size_t rows_sent = 0;
  for (int t = 0; t < tokens; ++t) {
    uint32_t mask = 0;
    for (int k = 0; k < topk; ++k) {
      const int e = data.topk_experts[t * topk + k];
      if (e >= 0) mask |= 1u << (e / per_rank);
    }
    rows_sent += __builtin_popcount(mask);
  }
  std::vector<std::unique_ptr<DeviceBuffer>> keep;
  auto d_tokens = Upload(keep, bf16.data(), bf16.size() * 2);
  auto d_experts = Upload(keep, data.topk_experts.data(), data.topk_experts.size() * 4);
  auto d_weights = Upload(keep, data.topk_weights.data(), data.topk_weights.size() * 4);
  const size_t expert_out_values = static_cast<size_t>(world) * tokens * topk * hidden;
  auto d_expert_out = Upload(keep, nullptr, expert_out_values * 2);
  auto d_out = Upload(keep, nullptr, static_cast<size_t>(tokens) * hidden * 2);
  BENCH_CHECK(d_tokens.status());
  BENCH_CHECK(d_experts.status());
  BENCH_CHECK(d_weights.status());
  BENCH_CHECK(d_expert_out.status());
  BENCH_CHECK(d_out.status());
  {  // Expert outputs: the tokens again, tiled (the values only matter for not being special).
    std::vector<uint16_t> tile(bf16);
    for (size_t at = 0; at < expert_out_values; at += tile.size()) {
      BENCH_CHECK(::kvt::CopyToDevice(static_cast<uint16_t*>(*d_expert_out) + at, tile.data(),
                                           std::min(tile.size(), expert_out_values - at) * 2));
    }
    BENCH_CHECK(::kvt::Synchronize());
  }
  void* const stream = a2a.stream();
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  const CudaMoeCallOptions call_options{.early_launch = !absl::GetFlag(FLAGS_plain_launches)};
  const auto dispatch = [&]() {
    return a2a.DispatchAsync(*d_tokens, static_cast<const int32_t*>(*d_experts), static_cast<const float*>(*d_weights),
                             tokens, call_options, stream);
  };
  auto timer = CudaEventTimer::Create();
  BENCH_CHECK(timer.status());
  // Times `iters` calls of `body` after 10 of warm-up; microseconds per call.
  const auto time_loop = [&](auto&& body) -> absl::StatusOr<float> {
    for (int i = 0; i < 10; ++i) {
      if (absl::Status s = body(); !s.ok()) return s;
    }
    if (absl::Status s = a2a.Synchronize(stream, deadline); !s.ok()) return s;
    if (absl::Status s = (*timer)->Start(CudaStream{stream}); !s.ok()) return s;
    for (int i = 0; i < iters; ++i) {
      if (absl::Status s = body(); !s.ok()) return s;
    }
    if (absl::Status s = (*timer)->Stop(CudaStream{stream}); !s.ok()) return s;
    absl::StatusOr<float> ms = (*timer)->ElapsedMs();
    if (!ms.ok()) return ms.status();
    if (absl::Status s = a2a.Synchronize(stream, deadline); !s.ok()) return s;
    return *ms * 1e3f / iters;
  };
  std::vector<float> record(kColumns + 1, 0.0f);
  absl::StatusOr<CudaDispatchResult> last;
  auto us = time_loop([&]() -> absl::Status {
    last = dispatch();
    return last.status();
  });
  BENCH_CHECK(us.status());
  record[kDispatch] = *us;
  us = time_loop([&]() { return a2a.CombineAsync(*last, *d_expert_out, *d_out, call_options, stream); });
  BENCH_CHECK(us.status());
  record[kCombine] = *us;
  us = time_loop([&]() -> absl::Status {
    last = dispatch();
    if (!last.ok()) return last.status();
    return a2a.CombineAsync(*last, *d_expert_out, *d_out, call_options, stream);
  });
  BENCH_CHECK(us.status());
  record[kBoth] = *us;
  if (nccl_comm != nullptr) {
    // The same bytes per rank as kvt's calls, split evenly over the peers (NCCL all-to-all needs equal blocks).
    const size_t fp8_row = static_cast<size_t>((hidden + 127) / 128) * 4 + hidden + 8 + 8 * topk;
    const size_t per_peer_rows = (rows_sent + world - 1) / world;
    const size_t sizes[3] = {per_peer_rows * fp8_row, per_peer_rows * hidden * 2, per_peer_rows * hidden * 2};
    auto in = Upload(keep, nullptr, sizes[1] * world);
    auto out = Upload(keep, nullptr, sizes[1] * world);
    BENCH_CHECK(in.status());
    BENCH_CHECK(out.status());
    for (int c = 0; c < 3; ++c) {
      us = time_loop([&]() { return nccl_comm->AllToAll(*in, *out, sizes[c], NcclType::kUint8, world, stream); });
      BENCH_CHECK(us.status());
      record[kNcclDispatch + c] = *us;
    }
  }
  record[kColumns] = static_cast<float>(rows_sent);
  self.records.Write(absl::OkStatus(), record);
  return 0;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int gpus = GpusForBenchmark();
  if (gpus == 0) return 1;
  std::vector<int> worlds;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_worlds), ',', absl::SkipEmpty())) {
    int w = 0;
    if (!absl::SimpleAtoi(s, &w) || w < 1 || w > gpus) {
      std::fprintf(stderr, "bad --worlds entry '%s' (%d GPUs here)\n", std::string(s).c_str(), gpus);
      return 1;
    }
    worlds.push_back(w);
  }
  if (worlds.empty()) worlds.push_back(gpus);
  const bool has_nccl = !absl::GetFlag(FLAGS_nccl_lib).empty();
  std::printf("\nMoE Dispatch + Combine: %d tokens per rank, hidden %d, top-%d of %d experts, bf16 tokens, FP8 "
              "dispatch (groups of 128), bf16 combine; microseconds per call, slowest rank, %d calls per loop\n\n",
              absl::GetFlag(FLAGS_tokens), absl::GetFlag(FLAGS_hidden), absl::GetFlag(FLAGS_topk),
              absl::GetFlag(FLAGS_experts), absl::GetFlag(FLAGS_iters));
  std::printf("| GPUs | rows sent per rank |");
  const int columns = has_nccl ? kColumns : kNcclDispatch;
  for (int c = 0; c < columns; ++c) std::printf(" %s |", kColumnNames[c]);
  if (has_nccl) std::printf(" NCCL D + C (same bytes) | kvt vs NCCL |");
  std::printf("\n| ---: | ---: |");
  for (int c = 0; c < columns + (has_nccl ? 2 : 0); ++c) std::printf(" ---: |");
  std::printf("\n");
  int rc = 0;
  for (int world : worlds) {
    ForkedRun run = RunForked(world, absl::Minutes(5), [&](ForkedRank& self) { return RunRank(self, world); });
    bool complete = true;
    for (int r = 0; r < world; ++r) {
      if (!run.exits[r].ok()) std::fprintf(stderr, "%s\n", run.exits[r].ToString().c_str());
      if (run.records[r].empty() || run.records[r][0].values.size() != kColumns + 1) complete = false;
    }
    if (!complete) {
      std::fprintf(stderr, "world %d: a rank wrote no timings\n", world);
      rc = 1;
      continue;
    }
    std::vector<float> worst(kColumns + 1, 0.0f);
    for (int r = 0; r < world; ++r) {
      for (int c = 0; c <= kColumns; ++c) worst[c] = std::max(worst[c], run.records[r][0].values[c]);
    }
    std::printf("| %d | %.0f |", world, worst[kColumns]);
    for (int c = 0; c < columns; ++c) std::printf(" %.1f |", worst[c]);
    if (has_nccl) {
      const float nccl_both = worst[kNcclDispatch] + worst[kNcclCombine];
      std::printf(" %.1f | %.2fx |", nccl_both, nccl_both / worst[kBoth]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace
}  // namespace kvt::collective

int main(int argc, char** argv) { return kvt::collective::Main(argc, argv); }
