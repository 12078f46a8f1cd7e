// CRC32C throughput beside memcpy of the same bytes, one core:
//   bazel run -c opt //common:crc32c_benchmark
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/crc32c.h"

namespace kvt {
namespace {

std::vector<uint8_t> Buffer(size_t n) {
  std::vector<uint8_t> b(n);
  std::mt19937 rng(1);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

void BM_Memcpy(benchmark::State& state) {
  const std::vector<uint8_t> src = Buffer(state.range(0));
  std::vector<uint8_t> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * src.size());
}

void BM_Crc32c(benchmark::State& state) {
  const std::vector<uint8_t> src = Buffer(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(Crc32c(src.data(), src.size()));
  state.SetBytesProcessed(state.iterations() * src.size());
}

void BM_Crc32cPortable(benchmark::State& state) {
  const std::vector<uint8_t> src = Buffer(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(internal::Crc32cPortable(0, src.data(), src.size()));
  state.SetBytesProcessed(state.iterations() * src.size());
}

BENCHMARK(BM_Memcpy)->Arg(4 << 10)->Arg(1 << 20);
BENCHMARK(BM_Crc32c)->Arg(4 << 10)->Arg(1 << 20);
BENCHMARK(BM_Crc32cPortable)->Arg(1 << 20);

}  // namespace
}  // namespace kvt

BENCHMARK_MAIN();
