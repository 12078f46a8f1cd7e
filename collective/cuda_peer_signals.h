// What the collective kernels of the CUDA backend (the AllReduce's and the MoE exchange's) share with their
// host code: the per-rank device status and the error bits of the signals between ranks. A signal is a 64-bit
// flag in the receiving rank's flag area, value = epoch * 4 + error bits, stored by the sender after its data
// (cuda_peer_signals.cuh), beside a word holding the sender's call tag. Plain C++; not API.
#ifndef KVT_COLLECTIVE_CUDA_PEER_SIGNALS_H_
#define KVT_COLLECTIVE_CUDA_PEER_SIGNALS_H_

#include <cstdint>

namespace kvt::collective::internal {

inline constexpr int kMaxCudaWorld = 16;

// Device status of one rank's communicator, zeroed at creation (CleanDeviceStatus); the host reads and clears it
// once a stream has finished.
struct DeviceStatus {
  unsigned long long first_bad_input;  // smallest index (in the call) of a non-finite input; ~0 if none
  unsigned long long first_bad_sum;    // smallest index of a non-finite reduced sum before a quantized step
  unsigned int errors;                 // DeviceError bits
  int peer;                            // the lowest rank seen timing out or disagreeing; kMaxCudaWorld if none
  unsigned int arrivals;               // blocks of the running kernel that finished (reset by the last one)
  int reporter;                        // the lowest rank that signalled an error bit; kMaxCudaWorld if none
  unsigned long long first_bad_route;  // smallest top-k slot index (token * topk + k) with a bad expert or weight
};

enum DeviceError : unsigned int {
  kBadInput = 1,       // a non-finite input value here
  kBadSum = 2,         // a non-finite reduced sum here, before a quantized step 2
  kPeerBadData = 4,    // another rank signalled bad data
  kTimedOut = 8,       // a wait for `peer` ran past the call's timeout
  kPeerTimedOut = 16,  // another rank signalled that it timed out
  kMismatch = 32,      // `peer` signalled a different call tag: the ranks disagree on the call
  kBadRouting = 64,    // an expert id out of range or a non-finite routing weight here (MoE dispatch)
};

// Flag error bits carried in a signal.
inline constexpr uint64_t kSignalBadData = 1;
inline constexpr uint64_t kSignalTimedOut = 2;

// Errors that a rank passes on to its peers as kSignalBadData.
inline constexpr unsigned kBadDataErrors = kBadInput | kBadSum | kPeerBadData | kMismatch | kBadRouting;

inline DeviceStatus CleanDeviceStatus() {
  DeviceStatus s{};
  s.first_bad_input = ~0ull;
  s.first_bad_sum = ~0ull;
  s.first_bad_route = ~0ull;
  s.peer = kMaxCudaWorld;
  s.reporter = kMaxCudaWorld;
  return s;
}

}  // namespace kvt::collective::internal

#endif  // KVT_COLLECTIVE_CUDA_PEER_SIGNALS_H_
