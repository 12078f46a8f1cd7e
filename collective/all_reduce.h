// The two-step AllReduce of Flash Communication over a CollectiveWire, as a Communicator.
//
// The input is cut into chunks of options.chunk_bytes / 4 values; each chunk is cut into world_size shards
// (ShardOf). Per chunk, rank r:
//   1. encodes every shard with the step-1 width and sends shard j to rank j (all-to-all), keeping its own;
//   2. decodes the N encodings of its shard r and sums them in fp32 in rank order 0, 1, ..., N-1;
//   3. encodes the sum with the step-2 width and sends it to every rank (all-gather);
//   4. decodes all N reduced shards into the output, its own from its own encoding.
// Only rank r computes shard r's sum and every rank decodes the same bytes with the same code, so all ranks
// end with bitwise identical results. Each message carries an 8-byte tag of the call (sequence number, chunk,
// step, size, options), so ranks that disagree on a call fail with FAILED_PRECONDITION instead of mixing
// data.
#ifndef KVT_COLLECTIVE_ALL_REDUCE_H_
#define KVT_COLLECTIVE_ALL_REDUCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/collective_wire.h"
#include "collective/communicator.h"

namespace kvt::collective {

// Shard `shard` of a chunk of n values split among world_size ranks: values [begin, begin + size). The first
// n % world_size shards hold one value more than the others.
struct ShardRange {
  size_t begin;
  size_t size;
};
ShardRange ShardOf(size_t n, int world_size, int shard);

// INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateAllReduceOptions(const AllReduceOptions& options);

class WireCommunicator : public Communicator {
 public:
  // Takes the wire of this rank; INVALID_ARGUMENT for a null wire.
  static absl::StatusOr<std::unique_ptr<WireCommunicator>> Create(std::unique_ptr<CollectiveWire> wire);

  int rank() const override { return wire_->rank(); }
  int world_size() const override { return wire_->world_size(); }
  absl::Status AllReduce(absl::Span<const float> in, absl::Span<float> out,
                         const AllReduceOptions& options) override;

 private:
  explicit WireCommunicator(std::unique_ptr<CollectiveWire> wire) : wire_(std::move(wire)) {}

  // Constant after construction
  const std::unique_ptr<CollectiveWire> wire_;

  // AllReduce calls so far: part of every message's tag.
  uint64_t calls_ = 0;
  // Scratch, reused across calls.
  std::vector<std::vector<uint8_t>> packed_;  // per rank
  std::vector<float> decoded_;
  std::vector<float> sum_;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_ALL_REDUCE_H_
