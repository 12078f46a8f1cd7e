// GPU codec throughput beside the device-to-device copy, measured in the same run (docs/RESULTS.md). One layer's K
// of a Llama-3.1-8B-shaped cache: 8 KV heads x 128 dims = 1024 channels, bf16, NHD blocks of 16 tokens,
// 32K tokens = 128 pages of 256 tokens (--page_tokens=N: pages of N), all pages in one launch. Times with CUDA
// events: warm-up, then the median of many repetitions, rotating over buffer sets larger than L2 so no repetition
// reads cached data. Two timings of every kernel (MedianMs' Timing): the main table's, with each call on an idle
// stream (host work before the launch and launch latency included, as a caller waiting on one call sees it), and a
// second table of device time alone (each call queued behind a StreamGate), where the copy is timed the same way.
// Bytes counted = bytes read + bytes written (the copy: 2 x size; encode: the bf16 input + the encoded
// payload; decode: the payload of the stages used + the bf16 output).
//
//   bazel run -c opt //codec/gpu:gpu_codec_benchmark [--page_tokens=N] [scheme ...]
//   (or .gpu/bin/gpu_codec_benchmark, tools/gpu)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "codec/gpu/codec_cuda.h"
#include "common/cuda_util.h"
#include "codec/gpu/host_containers.h"
#include "common/stream_gate.h"
#include "codec/test_pages.h"

ABSL_FLAG(int, page_tokens, 256,
          "tokens a page: the 32K-token layer is cut into pages of this many (a multiple of 16 dividing 32768)");

namespace kvt::codec::gpu {
namespace {

constexpr int kHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kChannels = kHeads * kHeadDim;
constexpr int kBlockTokens = 16;
constexpr int kLayerTokens = 32768;
constexpr int kBlocks = kLayerTokens / kBlockTokens;
// Tokens a page (--page_tokens; 256 = the tile encoder's 8 chunks of 32), and so pages in the layer.
int page_tokens = 256;
int PageCount() { return kLayerTokens / page_tokens; }
constexpr int kSets = 4;  // 4 x 64 MiB inputs per rotation: more than any current L2 (50-60 MB)
constexpr int kWarmup = 5;
constexpr int kReps = 60;

#define CHECK_OK(expr)                                                                  \
  do {                                                                                  \
    const absl::Status s_ = (expr);                                                     \
    if (!s_.ok()) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.ToString().c_str()); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

template <typename T>
T ValueOrDie(absl::StatusOr<T> v) {
  CHECK_OK(v.status());
  return std::move(*v);
}

// How a repetition is timed. kIdle: events around the call on an idle stream, so the stretch also holds the
// host's work before the first launch reaches the GPU (argument checks, staging, the launch calls) and the launch
// latency: what a caller waiting on one call sees. kGated: the stream waits at a StreamGate while the host
// enqueues the start event, the call and the stop event (nvbench's blocking kernel), so only device time counts.
enum class Timing { kIdle, kGated };

// Median milliseconds of `run(rep)` over kReps after kWarmup, timed with events on `stream`. A gated `run` must not
// wait for the stream on the host (StreamGate): each gated measurement here follows the idle one of the same call,
// so the call's tables are staged already and no synchronous upload happens behind the gate.
template <typename Run>
double MedianMs(CudaStream stream, Timing timing, Run run) {
  auto timer = ValueOrDie(CudaEventTimer::Create());
  std::unique_ptr<StreamGate> gate;
  if (timing == Timing::kGated) gate = ValueOrDie(StreamGate::Create());
  std::vector<float> ms;
  for (int r = 0; r < kWarmup + kReps; ++r) {
    if (gate) CHECK_OK(gate->Close(stream));
    CHECK_OK(timer->Start(stream));
    CHECK_OK(run(r));
    CHECK_OK(timer->Stop(stream));
    if (gate) gate->Open();
    const float t = ValueOrDie(timer->ElapsedMs());
    if (gate) CHECK_OK(gate->Passed());
    if (r >= kWarmup) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double GBps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

// One benchmark page of `scheme` encoded with `options`.
ContainerLayout PageLayout(const Scheme& scheme, const CodecOptions& options) {
  return PageLayoutFor(scheme, options, page_tokens, kChannels);
}

// Median host milliseconds of `run()` over `reps` runs (for synchronous calls, whose cost is mostly host work).
template <typename Run>
double HostMedianMs(int reps, Run run) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The daemons' synchronous calls on a layer's lynx pages, host time: the prefill side encodes a layer into host
// containers in one call; the decode side decodes each page by its own call as it lands (anchor, then full),
// with the same pages in one batched call for reference. The one-shot calls (EncodePagesCuda, DecodePagesCuda)
// allocate their staging per call; the ...With calls keep it, pinned.
void SynchronousCalls(CudaStream stream, const PagedKvView& src, const PagedKvView& dst, const int32_t* dev_ids,
                      const std::vector<int32_t>& ids) {
  const CodecOptions options;
  const ContainerLayout layout = PageLayout(ValueOrDie(ParseScheme("lynx")), options);
  auto enc = ValueOrDie(DeviceEncodedPages::Create(layout, PageCount()));
  CHECK_OK(EncodePagesCudaAsync(options, src, dev_ids, *enc, stream));
  CHECK_OK(CheckDeviceStatus(*enc, stream));
  const std::vector<EncodedPage> pages = ValueOrDie(enc->ToContainers(stream));
  std::vector<absl::Span<const uint8_t>> all;
  for (const EncodedPage& e : pages) all.push_back(e.bytes);
  const int bpp = page_tokens / kBlockTokens;

  const double enc_fresh = HostMedianMs(7, [&] {
    ValueOrDie(EncodePagesCuda(layout.scheme, options, src, page_tokens, ids, stream));
  });
  PageStaging enc_staging;
  const double enc_kept = HostMedianMs(7, [&] {
    ValueOrDie(EncodePagesCudaWith(enc_staging, layout.scheme, options, src, page_tokens, ids, stream));
  });
  HostContainers into(/*pinned=*/true);
  const double enc_into = HostMedianMs(7, [&] {
    CHECK_OK(EncodePagesCudaInto(enc_staging, into, layout.scheme, options, src, page_tokens, ids, stream));
  });
  // The daemon seals on its worker pool; here on kSealThreads threads taking pages in turn.
  constexpr int kSealThreads = 8;
  const PageLoop threads = [](size_t n, const std::function<void(size_t)>& fn) {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < kSealThreads; ++t) {
      pool.emplace_back([&] {
        for (size_t i = next++; i < n; i = next++) fn(i);
      });
    }
    for (std::thread& t : pool) t.join();
  };
  const double enc_into_par = HostMedianMs(7, [&] {
    CHECK_OK(EncodePagesCudaInto(enc_staging, into, layout.scheme, options, src, page_tokens, ids, stream, threads));
  });
  // The same containers either way.
  const std::vector<EncodedPage> with =
      ValueOrDie(EncodePagesCudaWith(enc_staging, layout.scheme, options, src, page_tokens, ids, stream));
  for (int p = 0; p < PageCount(); ++p) {
    const absl::Span<const uint8_t> c = into.container(p);
    if (!std::equal(c.begin(), c.end(), with[p].bytes.begin(), with[p].bytes.end())) {
      std::fprintf(stderr, "page %d: EncodePagesCudaInto's container differs from EncodePagesCudaWith's\n", p);
      std::exit(1);
    }
  }
  std::printf("\nlynx, a layer's %d pages (%.1f MB of containers) encoded by one synchronous call, host ms "
              "(pinned: %s):\n\n",
              PageCount(), PageCount() * into.container_bytes() / 1e6, into.pinned() ? "yes" : "no");
  std::printf("| EncodePagesCuda (staging per call) | EncodePagesCudaWith (kept staging, copied into vectors) "
              "| EncodePagesCudaInto (pinned containers, sealed on 1 thread) | the same, sealed on %d threads |\n",
              kSealThreads);
  std::printf("| --- | --- | --- | --- |\n");
  std::printf("| %.2f | %.2f | %.2f | %.2f |\n", enc_fresh, enc_kept, enc_into, enc_into_par);

  std::printf("\nlynx, one synchronous call per page (the daemon's decode path), %d pages; host us per page:\n\n",
              PageCount());
  std::printf("| stages | DecodePagesCuda (staging per call) | DecodePagesCudaWith (kept) | ratio "
              "| one batched call |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (int stages : {1, 2}) {
    // Microseconds per page of decoding every page by decode(containers, block ids).
    auto per_page_us = [&](auto decode) {
      return HostMedianMs(5, [&] {
               for (int p = 0; p < PageCount(); ++p) {
                 CHECK_OK(decode(absl::MakeConstSpan(&all[p], 1),
                                 absl::Span<const int32_t>(ids.data() + p * bpp, bpp)));
               }
             }) * 1000.0 / PageCount();
    };
    const double fresh = per_page_us([&](auto c, auto page_ids) {
      return DecodePagesCuda(c, stages, options, dst, page_ids, stream);
    });
    PageStaging staging;
    const double kept = per_page_us([&](auto c, auto page_ids) {
      return DecodePagesCudaWith(staging, c, stages, options, dst, page_ids, stream);
    });
    const double batched =
        HostMedianMs(5, [&] { CHECK_OK(DecodePagesCudaWith(staging, all, stages, options, dst, ids, stream)); }) *
        1000.0 / PageCount();
    std::printf("| %d | %.1f | %.1f | %.1fx | %.1f |\n", stages, fresh, kept, fresh / kept, batched);
  }
}

void Run(const std::vector<std::string>& only) {
  const int devices = ValueOrDie(CudaDeviceCount());
  if (devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    std::exit(1);
  }
  std::printf("device: %s\n", ValueOrDie(CudaDeviceDescription()).c_str());
  auto owned_stream = ValueOrDie(OwnedCudaStream::Create());
  const CudaStream stream = owned_stream->get();

  // Inputs: kSets copies of the layer, each filled with realistic (bf16-rounded) pages; identity block ids.
  const PagedKvView shape{nullptr, KvDType::kBfloat16, KvLayout::kNhd, kBlocks, kBlockTokens, kHeads, kHeadDim};
  const size_t kv_bytes = shape.bytes();
  std::vector<uint16_t> host(kv_bytes / 2);
  for (int p = 0; p < PageCount(); ++p) {
    const TestPage page = RealisticPage(page_tokens, kChannels, 1000 + p);
    for (size_t i = 0; i < page.data.size(); ++i) {
      uint32_t b;
      std::memcpy(&b, &page.data[i], 4);
      host[static_cast<size_t>(p) * page.data.size() + i] = static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
    }
  }
  std::vector<std::unique_ptr<DeviceBuffer>> in_bufs, out_bufs;
  std::vector<PagedKvView> in_kv, out_kv;
  for (int s = 0; s < kSets; ++s) {
    in_bufs.push_back(ValueOrDie(DeviceBuffer::Create(kv_bytes)));
    out_bufs.push_back(ValueOrDie(DeviceBuffer::Create(kv_bytes)));
    CHECK_OK(CopyToDevice(in_bufs.back()->get(), host.data(), kv_bytes, stream));
    in_kv.push_back(shape);
    in_kv.back().data = in_bufs.back()->get();
    out_kv.push_back(shape);
    out_kv.back().data = out_bufs.back()->get();
  }
  std::vector<int32_t> ids(kBlocks);
  for (int i = 0; i < kBlocks; ++i) ids[i] = i;
  auto d_ids = ValueOrDie(DeviceBuffer::Create(ids.size() * 4));
  CHECK_OK(CopyToDevice(d_ids->get(), ids.data(), ids.size() * 4, stream));
  const int32_t* dev_ids = static_cast<const int32_t*>(d_ids->get());
  CHECK_OK(Synchronize(stream));

  auto copy = [&](int r) {
    return CopyDeviceToDevice(out_bufs[r % kSets]->get(), in_bufs[(r + 1) % kSets]->get(), kv_bytes, stream);
  };
  const double copy_ms = MedianMs(stream, Timing::kIdle, copy);
  const double copy_gbps = GBps(2.0 * kv_bytes, copy_ms);
  const double gated_copy_ms = MedianMs(stream, Timing::kGated, copy);
  const double gated_copy_gbps = GBps(2.0 * kv_bytes, gated_copy_ms);
  // Each scheme's row of the device-time table, printed after the main one.
  std::vector<std::string> gated_rows;
  std::printf("layer: %d pages x %d tokens x %d channels bf16 (%.1f MiB), NHD blocks of %d tokens; %d reps, median\n",
              PageCount(), page_tokens, kChannels, kv_bytes / 1048576.0, kBlockTokens, kReps);
  std::printf("device-to-device copy: %.3f ms, %.0f GB/s (read + write)\n\n", copy_ms, copy_gbps);
  std::printf("| scheme | bits/value | encode ms | encode GB/s | vs copy | decode full ms | decode GB/s | vs copy | "
              "anchor-only ms | anchor GB/s | vs copy | anchor, table extremes ms |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");

  const std::vector<std::string> schemes = {"bf16",      "int8",      "int4",        "fp8",   "lynx",    "lynx-a2r6",
                                            "lynx-a3r5", "lynx-a4r4", "lynx-a2r2r4", "lynx8", "lynx4"};
  for (const std::string& name : only.empty() ? schemes : only) {
    const Scheme scheme = ValueOrDie(ParseScheme(name));
    CodecOptions options;
    const ContainerLayout layout = PageLayout(scheme, options);
    std::vector<std::unique_ptr<DeviceEncodedPages>> enc;
    for (int s = 0; s < kSets; ++s) enc.push_back(ValueOrDie(DeviceEncodedPages::Create(layout, PageCount())));

    auto encode = [&](int r) {
      return EncodePagesCudaAsync(options, in_kv[r % kSets], dev_ids, *enc[r % kSets], stream);
    };
    const double enc_ms = MedianMs(stream, Timing::kIdle, encode);
    const double gated_enc_ms = MedianMs(stream, Timing::kGated, encode);
    for (int s = 0; s < kSets; ++s) CHECK_OK(CheckDeviceStatus(*enc[s], stream));
    const double payload = static_cast<double>(enc[0]->payload_bytes());
    const double enc_gbps = GBps(kv_bytes + payload, enc_ms);

    auto decode_ms = [&](int stages, bool exact_extremes = CodecOptions{}.exact_extremes,
                         Timing timing = Timing::kIdle) {
      CodecOptions decode_options = options;
      decode_options.exact_extremes = exact_extremes;
      return MedianMs(stream, timing, [&](int r) {
        return DecodePagesCudaAsync(*enc[r % kSets], stages, decode_options, out_kv[(r + 1) % kSets], dev_ids,
                                    stream);
      });
    };
    const int full = scheme.num_streams();
    const double dec_ms = decode_ms(full);
    const double dec_gbps = GBps(payload + kv_bytes, dec_ms);
    const double gated_dec_ms = decode_ms(full, CodecOptions{}.exact_extremes, Timing::kGated);
    std::string gated_anchor = "- | -";
    double anchor_bytes = static_cast<double>(enc[0]->meta_bytes() + enc[0]->codes_bytes(0)) * PageCount();
    std::string anchor_cells = "- | - | -";
    if (full > 1) {
      const double a_ms = decode_ms(1);
      const double a_gbps = GBps(anchor_bytes + kv_bytes, a_ms);
      anchor_cells = absl::StrFormat("%.3f | %.0f | %.2f", a_ms, a_gbps, a_gbps / copy_gbps);
      // The same without the exact-extremes rule (the anchor columns use the default, the rule on).
      const double t_ms = decode_ms(1, false);
      anchor_cells += absl::StrFormat(" | %.3f", t_ms);
      const double gated_a_ms = decode_ms(1, CodecOptions{}.exact_extremes, Timing::kGated);
      gated_anchor = absl::StrFormat("%.3f | %.2f", gated_a_ms,
                                     GBps(anchor_bytes + kv_bytes, gated_a_ms) / gated_copy_gbps);
    } else {
      anchor_cells += " | -";
    }
    for (int s = 0; s < kSets; ++s) CHECK_OK(CheckDeviceStatus(*enc[s], stream));
    const double bits = payload * 8.0 / (static_cast<double>(PageCount()) * page_tokens * kChannels);
    std::printf("| %s | %.2f | %.3f | %.0f | %.2f | %.3f | %.0f | %.2f | %s |\n", name.c_str(), bits, enc_ms, enc_gbps,
                enc_gbps / copy_gbps, dec_ms, dec_gbps, dec_gbps / copy_gbps, anchor_cells.c_str());
    std::fflush(stdout);
    gated_rows.push_back(absl::StrFormat("| %s | %.3f | %.2f | %.3f | %.2f | %s |", name, gated_enc_ms,
                                         GBps(kv_bytes + payload, gated_enc_ms) / gated_copy_gbps, gated_dec_ms,
                                         GBps(payload + kv_bytes, gated_dec_ms) / gated_copy_gbps, gated_anchor));
  }
  std::printf("\ndevice time alone: each call queued behind a StreamGate, so the host's work before the launch and "
              "the launch latency are not timed (nvbench's method); the copy the same way: %.3f ms, %.0f GB/s\n\n",
              gated_copy_ms, gated_copy_gbps);
  std::printf("| scheme | encode ms | vs copy | decode full ms | vs copy | anchor-only ms | vs copy |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const std::string& row : gated_rows) std::printf("%s\n", row.c_str());
  SynchronousCalls(stream, in_kv[0], out_kv[0], dev_ids, ids);
  const double copy2_ms = MedianMs(stream, Timing::kIdle, copy);
  std::printf("\ndevice-to-device copy again at the end: %.3f ms, %.0f GB/s\n", copy2_ms, GBps(2.0 * kv_bytes, copy2_ms));
}

}  // namespace
}  // namespace kvt::codec::gpu

// Arguments, if any, name the schemes to run (default: all standard ones).
int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("gpu_codec_benchmark [--page_tokens=N] [scheme ...]");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_page_tokens);
  if (n < kvt::codec::gpu::kBlockTokens || n % kvt::codec::gpu::kBlockTokens != 0 ||
      kvt::codec::gpu::kLayerTokens % n != 0) {
    std::fprintf(stderr, "--page_tokens=%d: want a multiple of %d that divides %d (e.g. 128, 256, 512)\n", n,
                 kvt::codec::gpu::kBlockTokens, kvt::codec::gpu::kLayerTokens);
    return 2;
  }
  kvt::codec::gpu::page_tokens = n;
  kvt::codec::gpu::Run(std::vector<std::string>(args.begin() + 1, args.end()));
  return 0;
}
