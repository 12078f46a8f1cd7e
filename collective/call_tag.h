// Call tags: a 64-bit hash of the parameters every rank of a collective must agree on (call number, step, sizes,
// options). Ranks send theirs with each message or signal and compare it with their own, so a rank at a
// different call fails with FAILED_PRECONDITION instead of mixing data. Not cryptographic. Thread-safe.
#ifndef KVT_COLLECTIVE_CALL_TAG_H_
#define KVT_COLLECTIVE_CALL_TAG_H_

#include <cstdint>
#include <initializer_list>

namespace kvt::collective {

// Folds `values`, in order, into `seed`.
inline uint64_t CallTag(uint64_t seed, std::initializer_list<uint64_t> values) {
  uint64_t hash = seed;
  for (uint64_t value : values) {
    hash ^= value + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
    hash *= 0xff51afd7ed558ccdull;
  }
  return hash;
}

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_CALL_TAG_H_
