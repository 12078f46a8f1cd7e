// Host-side cost of the quantized AllReduce's codec: quantize and dequantize throughput per width, beside a
// memcpy of the same fp32 bytes; and one in-process two-rank AllReduce per width.
//   bazel run -c opt //collective:all_reduce_benchmark
// Throughput is in fp32 input bytes per second.
#include <cstring>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "collective/all_reduce.h"
#include "collective/in_process_wire.h"
#include "collective/quantizer.h"

namespace kvt::collective {
namespace {

constexpr size_t kValues = 1 << 20;  // 4 MiB of fp32

std::vector<float> Input() {
  std::vector<float> x(kValues);
  uint32_t state = 12345;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / (1 << 20);
  }
  return x;
}

void BM_Memcpy(benchmark::State& state) {
  const std::vector<float> in = Input();
  std::vector<float> out(kValues);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), kValues * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kValues * sizeof(float));
}
BENCHMARK(BM_Memcpy);

void BM_Quantize(benchmark::State& state) {
  auto q = GroupQuantizer::Create(
      {.bits = static_cast<int>(state.range(0)), .spike_reserve = state.range(1) != 0});
  const std::vector<float> in = Input();
  std::vector<uint8_t> packed(q->PackedSize(kValues));
  for (auto _ : state) {
    benchmark::DoNotOptimize(q->Quantize(in, absl::MakeSpan(packed)));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kValues * sizeof(float));
  state.counters["ratio"] = static_cast<double>(kValues * sizeof(float)) / packed.size();
}
BENCHMARK(BM_Quantize)->ArgsProduct({{2, 3, 4, 5, 6, 8}, {0, 1}})->ArgNames({"bits", "spike"});

void BM_Dequantize(benchmark::State& state) {
  auto q = GroupQuantizer::Create(
      {.bits = static_cast<int>(state.range(0)), .spike_reserve = state.range(1) != 0});
  const std::vector<float> in = Input();
  std::vector<uint8_t> packed(q->PackedSize(kValues));
  (void)q->Quantize(in, absl::MakeSpan(packed));
  std::vector<float> out(kValues);
  for (auto _ : state) {
    benchmark::DoNotOptimize(q->Dequantize(packed, absl::MakeSpan(out)));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kValues * sizeof(float));
}
BENCHMARK(BM_Dequantize)->ArgsProduct({{2, 3, 4, 5, 6, 8}, {0, 1}})->ArgNames({"bits", "spike"});

// Two ranks as threads over the in-process hub; step widths both state.range(0) (0 = fp32).
void BM_InProcessAllReduce(benchmark::State& state) {
  const AllReduceOptions options{.step1_bits = static_cast<int>(state.range(0)),
                                 .step2_bits = static_cast<int>(state.range(0))};
  auto hub = std::make_shared<InProcessHub>(2);
  auto rank0 = WireCommunicator::Create(hub->Wire(0));
  auto rank1 = WireCommunicator::Create(hub->Wire(1));
  const std::vector<float> in = Input();
  std::vector<float> out0(kValues), out1(kValues);
  for (auto _ : state) {
    std::thread peer([&] { (void)(*rank1)->AllReduce(in, absl::MakeSpan(out1), options); });
    benchmark::DoNotOptimize((*rank0)->AllReduce(in, absl::MakeSpan(out0), options));
    peer.join();
  }
  state.SetBytesProcessed(state.iterations() * kValues * sizeof(float));
}
BENCHMARK(BM_InProcessAllReduce)->Arg(0)->Arg(4)->Arg(8)->ArgName("bits")->UseRealTime();

}  // namespace
}  // namespace kvt::collective

BENCHMARK_MAIN();
