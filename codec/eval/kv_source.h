// Where evaluated KV comes from: the synthetic generator, or a .npy dump of shape [L, 2, T, H, D] (all layers'
// K and V) or [T, C] (one tensor, which has no attention structure: NMSE and bits only). Thread-compatible:
// Layer() may be called from several threads on a const source.
#ifndef KVT_CODEC_EVAL_KV_SOURCE_H_
#define KVT_CODEC_EVAL_KV_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/eval/metrics.h"
#include "codec/eval/npy.h"
#include "codec/eval/synthetic_kv.h"

namespace kvt::codec::eval {

class KvSource {
 public:
  virtual ~KvSource() = default;

  virtual int num_layers() const = 0;
  // The attention layout of every layer (tokens, kv heads, head_dim, query heads).
  virtual HeadLayout layout() const = 0;
  // False for a single [T, C] tensor: Layer() then returns it as `k` and leaves `v` empty.
  virtual bool has_attention() const = 0;
  // Layer `l`'s K and V, [tokens, channels] each. 0 <= l < num_layers().
  virtual LayerKv Layer(int l) const = 0;
  // One line for reports, e.g. "synthetic llama-3.1-8b (laplace bulk, seed 1), 2048 tokens".
  virtual std::string Describe() const = 0;
};

// The synthetic generator with validated options.
absl::StatusOr<std::unique_ptr<KvSource>> MakeSyntheticSource(const SyntheticKvOptions& options);

// A loaded .npy array: [L, 2, T, H, D] (query heads = H * gqa_group) or [T, C]. INVALID_ARGUMENT for any
// other shape, or gqa_group < 1. Takes ownership of the array.
absl::StatusOr<std::unique_ptr<KvSource>> MakeNpySource(NpyArray array, std::string name, int gqa_group = 4);

}  // namespace kvt::codec::eval

#endif  // KVT_CODEC_EVAL_KV_SOURCE_H_
