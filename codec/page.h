// A page: the codec's unit of work (docs/FORMAT.md). `tokens` consecutive tokens of one layer's K or V, all
// channels (a channel is one (head, dim) pair), token-major: value (t, c) is at data[t * row_stride + c].
// Views do not own memory; the caller keeps it alive for the duration of the call that takes the view.
#ifndef KVT_CODEC_PAGE_H_
#define KVT_CODEC_PAGE_H_

#include <cstddef>
#include <cstdint>

namespace kvt::codec {

struct PageView {
  const float* data = nullptr;
  int tokens = 0;
  int channels = 0;
  // Floats between the starts of consecutive tokens; 0 means `channels` (dense).
  size_t row_stride = 0;

  size_t stride() const { return row_stride == 0 ? static_cast<size_t>(channels) : row_stride; }
  float at(int t, int c) const { return data[static_cast<size_t>(t) * stride() + c]; }
  size_t num_values() const { return static_cast<size_t>(tokens) * channels; }
};

struct MutablePageView {
  float* data = nullptr;
  int tokens = 0;
  int channels = 0;
  size_t row_stride = 0;

  size_t stride() const { return row_stride == 0 ? static_cast<size_t>(channels) : row_stride; }
  float& at(int t, int c) const { return data[static_cast<size_t>(t) * stride() + c]; }
  size_t num_values() const { return static_cast<size_t>(tokens) * channels; }
};

// Limits enforced on every encode and on every container decoded (untrusted input).
inline constexpr int kMaxPageTokens = 1 << 16;
inline constexpr int kMaxPageChannels = 1 << 16;
inline constexpr size_t kMaxPageValues = size_t{1} << 26;  // 64 Mi values, 256 MiB of float32

// The page size kvtd picks when not told (--page_tokens=0), and kvtctl codec's --page-tokens=0: the smallest power
// of two of at least 2048 tokens whose page holds 2^21 values (channels * tokens), at most 8192 tokens. 2048 for
// Llama-8B or Qwen3-32B (1024 channels), 8192 for SmolLM2-135M (192). A page's streams are the data plane's chunks
// and a decode's unit, and each costs about the same whatever its size, so pages sized in values rather than
// tokens keep small-head models from paying that cost per few KB; and lynx's per-page-channel metadata (frame and
// frame spikes, docs/FORMAT.md) fits its bit budget from 2048 tokens (docs/DAEMON.md, "Page size").
constexpr int AutoPageTokens(int channels) {
  int tokens = 2048;
  while (tokens < 8192 && int64_t{tokens} * channels < (int64_t{1} << 21)) tokens *= 2;
  return tokens;
}

// The tokens of kvtd's pages (kv::MakeTransferPlan) for `channels` channels, asked for `target` tokens (0:
// AutoPageTokens): whole chunks of `chunk_tokens` (at least one), and no more values than a page may hold.
constexpr int PlannedPageTokens(int channels, int target, int chunk_tokens) {
  const int64_t want = target == 0 ? AutoPageTokens(channels) : target;
  const int64_t most_values = static_cast<int64_t>(kMaxPageValues) / (channels > 0 ? channels : 1);
  const int64_t most = most_values < kMaxPageTokens ? most_values : kMaxPageTokens;
  const int64_t tokens = (want < most ? want : most) / chunk_tokens * chunk_tokens;
  return static_cast<int>(tokens > chunk_tokens ? tokens : chunk_tokens);
}

}  // namespace kvt::codec

#endif  // KVT_CODEC_PAGE_H_
