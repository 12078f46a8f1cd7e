// A synthetic KV cache that looks like real KV (docs/CODEC.md), for evaluating the codec without a model:
// per layer K and V as [tokens, kv_heads * head_dim] float32, token-major (channel = head * head_dim + dim),
// exactly the layout of a codec PageView. Deterministic: the same options and layer give the same bytes.
// Thread-safe: generating different layers from different threads is fine.
//
// What makes it realistic (each is checked by synthetic_kv_test.cc):
//  - K is a pre-rotary key with a per-channel mean plus a heavy-tailed bulk, rotated with RoPE (pairs
//    (i, i + head_dim/2) at frequency base^(-2i/head_dim), as Llama/Qwen do), so high-frequency pairs spin
//    with position and low-frequency pairs keep a large constant offset;
//  - a few outlier channels per K head (both dims of a low-frequency pair), 10-100x the bulk scale, and a rare
//    milder one in V;
//  - a near-Laplacian bulk (or Student-t with 3 degrees of freedom, the heavier-tailed variant);
//  - "sink" tokens (token 0 and a few others) with a much larger norm in K and V;
//  - values representable in bfloat16, the dtype engines keep KV in.
//
//   KVT_ASSIGN_OR_RETURN(SyntheticKvOptions o, SyntheticKvOptions::ForModel("llama-3.1-8b", 2048));
//   LayerKv kv = GenerateLayer(o, /*layer=*/3);   // kv.k.size() == 2048 * 8 * 128
#ifndef KVT_CODEC_EVAL_SYNTHETIC_KV_H_
#define KVT_CODEC_EVAL_SYNTHETIC_KV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvt::codec::eval {

// The attention shape of a model (what the KV cache depends on).
struct ModelShape {
  std::string name;
  int layers = 0;
  int kv_heads = 0;
  int query_heads = 0;  // a multiple of kv_heads (grouped-query attention)
  int head_dim = 0;     // even (RoPE pairs)
  double rope_base = 10000.0;

  int channels() const { return kv_heads * head_dim; }
};

// The presets: "llama-3.1-8b" (32 layers, 32 q / 8 kv heads, head_dim 128, RoPE base 500000),
// "qwen3-32b" (64 layers, 64 q / 8 kv heads, head_dim 128, base 1000000), "smollm2-135m" (30 layers, 9 q / 3 kv
// heads, head_dim 64, base 100000: the reference engine's model, whose pages are small), "tiny" (4 layers, 4 q /
// 2 kv heads, head_dim 16: for tests).
std::vector<std::string> ModelPresetNames();
// INVALID_ARGUMENT listing the presets for an unknown name.
absl::StatusOr<ModelShape> ModelPreset(absl::string_view name);

enum class BulkDistribution {
  kLaplace,   // near-Laplacian bulk, as measured on real K and V
  kStudentT,  // Student-t with 3 degrees of freedom, scaled to the same standard deviation: heavier tails
};

// "laplace" / "student-t"; INVALID_ARGUMENT otherwise.
absl::StatusOr<BulkDistribution> ParseBulkDistribution(absl::string_view name);
const char* BulkDistributionName(BulkDistribution d);

struct SyntheticKvOptions {
  ModelShape model;
  int tokens = 2048;  // context length, >= 1
  uint64_t seed = 1;
  BulkDistribution bulk = BulkDistribution::kLaplace;
  // Roughly one sink token per this many tokens besides token 0 (0: token 0 only).
  int sink_every = 512;
  // Round every value to bfloat16 (nearest even), as an engine's KV cache holds it; the bf16 scheme is then
  // lossless, as it is on real KV.
  bool bf16_values = true;

  // The preset `model_name` with `tokens` tokens and the other fields at their defaults.
  static absl::StatusOr<SyntheticKvOptions> ForModel(absl::string_view model_name, int tokens);
  // OK, or INVALID_ARGUMENT naming the bad field.
  absl::Status Validate() const;
};

struct LayerKv {
  int tokens = 0;
  int channels = 0;
  std::vector<float> k;  // [tokens, channels]
  std::vector<float> v;  // [tokens, channels]
};

// Generates layer `layer` (0 <= layer < model.layers) of a validated `options`.
LayerKv GenerateLayer(const SyntheticKvOptions& options, int layer);

// The token positions that are sinks in every layer of `options` (ascending; always includes 0).
std::vector<int> SinkTokens(const SyntheticKvOptions& options);

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_SYNTHETIC_KV_H_
