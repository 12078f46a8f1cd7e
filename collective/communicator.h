// A group of ranks that run collectives together (docs/COLLECTIVES.md). Every rank of the group calls the
// same collectives in the same order with the same sizes and options; each call returns when this rank's part
// is done. Backends: WireCommunicator (all_reduce.h) over a CollectiveWire (in-process threads, TCP); the
// CUDA peer-memory backend is still to come (docs/COLLECTIVES.md).
//
// Threading: one thread at a time calls a Communicator.
#ifndef KVT_COLLECTIVE_COMMUNICATOR_H_
#define KVT_COLLECTIVE_COMMUNICATOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kvt::collective {

// A two-step AllReduce (sum): step 1 quantizes each rank's shards for the all-to-all reduce-scatter, step 2
// quantizes each reduced shard for the all-gather. A width of 0 sends that step as plain fp32.
struct AllReduceOptions {
  // Code width of step 1 (reduce-scatter): 0 (fp32) or 2..8. Default 8.
  int step1_bits = 8;
  // Code width of step 2 (all-gather): 0 (fp32) or 2..8. Default 8. The paper's "INT6" is 4 then 8.
  int step2_bits = 8;
  // Values per quantization group, 1..65536. Default 128.
  int group_size = 128;
  // Send each group's largest-magnitude value exactly (QuantizerOptions::spike_reserve). Default off.
  bool spike_reserve = false;
  // fp32 input bytes per chunk; each chunk is one two-step round. At least 4 * world size; default 1 MiB.
  size_t chunk_bytes = size_t{1} << 20;
  // How long one AllReduce may wait on its peers in total. Default 30 s.
  absl::Duration timeout = absl::Seconds(30);
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // out[i] = sum over ranks of their in[i], within the error bound of the widths (docs/COLLECTIVES.md), and
  // bitwise identical on every rank. `in` and `out` have the same size on every rank; `out` may be `in`
  // itself (not a partial overlap). INVALID_ARGUMENT for bad options or sizes or a non-finite value (in the
  // input, or a sum that overflowed fp32); UNAVAILABLE when a peer is gone; DEADLINE_EXCEEDED when a peer
  // does not answer within options.timeout. After an error the group is out of step: make a new one.
  virtual absl::Status AllReduce(absl::Span<const float> in, absl::Span<float> out,
                                 const AllReduceOptions& options) = 0;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_COMMUNICATOR_H_
