// Codec throughput on one core: EncodePage and DecodePage (every stage count) of each scheme and
// implementation on a realistic 256 x 1024 page (Llama-8B's 8 KV heads), and on a 256 x 192 one (SmolLM2-135M's
// 3 KV heads: ".../small"), where a page's fixed costs weigh 5x more, and for lynx on kvtd's own 2048 x 1024 page
// (codec::AutoPageTokens(1024): ".../page2048"), beside memcpy of the same float bytes.
// Counters: values/s ("items_per_second") and input float bytes/s ("bytes_per_second"). Partial decodes run
// with the default exact-extremes rule and again as ".../table-extremes" without it.
//   bazel run -c opt //codec:codec_benchmark -- --benchmark_filter=lynx
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "codec/codec.h"
#include "codec/page.h"
#include "codec/test_pages.h"

namespace kvt::codec {
namespace {

constexpr int kTokens = 256;
constexpr int kChannels = 1024;
constexpr int kSmallChannels = 192;
constexpr int kDaemonTokens = AutoPageTokens(kChannels);  // what kvtd encodes (2048)

// The page of `tokens` (kTokens or kDaemonTokens) x `channels`.
const TestPage& Page(int channels = kChannels, int tokens = kTokens) {
  static const TestPage* page = new TestPage(RealisticPage(kTokens, kChannels, 42));
  static const TestPage* small = new TestPage(RealisticPage(kTokens, kSmallChannels, 42));
  static const TestPage* daemon = new TestPage(RealisticPage(kDaemonTokens, kChannels, 42));
  if (tokens == kDaemonTokens) return *daemon;
  return channels == kSmallChannels ? *small : *page;
}

void SetCounters(benchmark::State& state, int channels = kChannels, int tokens = kTokens) {
  const int64_t values = static_cast<int64_t>(tokens) * channels;
  state.SetItemsProcessed(state.iterations() * values);
  state.SetBytesProcessed(state.iterations() * values * static_cast<int64_t>(sizeof(float)));
}

void BM_Memcpy(benchmark::State& state) {
  const TestPage& page = Page();
  std::vector<float> dst(page.data.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), page.data.data(), page.data.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state);
}
BENCHMARK(BM_Memcpy);

void BM_Encode(benchmark::State& state, std::string scheme_name, CodecImpl impl, int channels, int tokens) {
  if (!ImplAvailable(impl)) {
    state.SkipWithError("implementation not supported by this CPU");
    return;
  }
  const Scheme scheme = *ParseScheme(scheme_name);
  CodecOptions options;
  options.impl = impl;
  size_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<EncodedPage> enc = EncodePage(scheme, options, Page(channels, tokens).view());
    if (!enc.ok()) {
      state.SkipWithError(std::string(enc.status().message()).c_str());
      return;
    }
    bytes = enc->bytes.size();
    benchmark::DoNotOptimize(enc->bytes.data());
  }
  SetCounters(state, channels, tokens);
  state.counters["bits_per_value"] = 8.0 * bytes / (static_cast<double>(tokens) * channels);
}

void BM_Decode(benchmark::State& state, std::string scheme_name, CodecImpl impl, int stages, bool exact_extremes,
               int channels, int tokens) {
  if (!ImplAvailable(impl)) {
    state.SkipWithError("implementation not supported by this CPU");
    return;
  }
  const Scheme scheme = *ParseScheme(scheme_name);
  CodecOptions options;
  options.impl = impl;
  options.exact_extremes = exact_extremes;
  absl::StatusOr<EncodedPage> enc = EncodePage(scheme, options, Page(channels, tokens).view());
  std::vector<float> out(Page(channels, tokens).data.size());
  MutablePageView view{out.data(), tokens, channels, 0};
  for (auto _ : state) {
    absl::Status st = DecodePage(enc->bytes, stages, view, options);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(out.data());
  }
  SetCounters(state, channels, tokens);
}

void RegisterAll() {
  std::vector<std::string> schemes = StandardSchemeNames();
  schemes.push_back("lynx+spike");
  schemes.push_back("lynx+f0");  // lynx without frame spikes: what selecting and masking them costs
  for (const std::string& name : schemes) {
    const Scheme scheme = *ParseScheme(name);
    for (CodecImpl impl : {CodecImpl::kReference, CodecImpl::kAvx2, CodecImpl::kAvx512}) {
      // The baselines have one (scalar) implementation, but for int8 / int4's encoder, whose per-value loops
      // also run in AVX2 (for kAvx2 and kAvx512 alike: list it once, as avx2).
      const bool uniform = scheme.kind == SchemeKind::kInt8 || scheme.kind == SchemeKind::kInt4;
      if (scheme.kind != SchemeKind::kLynx && impl != CodecImpl::kReference && !(uniform && impl == CodecImpl::kAvx2)) {
        continue;
      }
      // (channels, tokens): the standard page, the small one and, for lynx, kvtd's 2048-token page.
      std::vector<std::pair<int, int>> shapes = {{kChannels, kTokens}, {kSmallChannels, kTokens}};
      if (scheme.kind == SchemeKind::kLynx) shapes.push_back({kChannels, kDaemonTokens});
      for (const auto& [channels, tokens] : shapes) {
        const std::string suffix = name + "/" + ImplName(impl);
        const std::string shape =
            tokens == kDaemonTokens ? "/page2048" : (channels == kSmallChannels ? "/small" : "");
        benchmark::RegisterBenchmark(("BM_Encode/" + suffix + shape).c_str(), BM_Encode, name, impl, channels,
                                     tokens);
        // The uniform decoder is scalar whatever the impl: its one row is the reference's.
        const bool decoder_of_its_own = scheme.kind == SchemeKind::kLynx || impl == CodecImpl::kReference;
        for (int stages = 1; decoder_of_its_own && stages <= scheme.num_streams(); ++stages) {
          const std::string decode = "BM_Decode/" + suffix + "/stages:" + std::to_string(stages);
          benchmark::RegisterBenchmark((decode + shape).c_str(), BM_Decode, name, impl, stages, true, channels,
                                       tokens);
          // A partial decode again without the exact-extremes rule, so its cost is seen side by side.
          if (stages < scheme.num_streams()) {
            benchmark::RegisterBenchmark((decode + "/table-extremes" + shape).c_str(), BM_Decode, name, impl, stages,
                                         false, channels, tokens);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvt::codec

int main(int argc, char** argv) {
  kvt::codec::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
