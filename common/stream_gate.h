// A gate that holds a CUDA stream's later work until the host opens it, so that a benchmark times device work
// alone (the method of nvbench's blocking kernel). Timed with events on an idle stream, a call's stretch also
// holds the host's own work before its first launch reaches the GPU (argument checks, table staging, the launch
// calls: several microseconds, 10-20% of a 50 us kernel) and the launch latency. With the stream held at a gate,
// the host enqueues the start event, the work and the stop event while the GPU waits; opening the gate then runs
// them back to back.
//
//   auto gate = ValueOrDie(StreamGate::Create());
//   CHECK_OK(gate->Close(stream));  // a one-thread kernel that waits for Open()
//   timer->Start(stream); Launch(stream); timer->Stop(stream);
//   gate->Open();
//   float ms = ValueOrDie(timer->ElapsedMs());
//   CHECK_OK(gate->Passed());       // DEADLINE_EXCEEDED: the kernel gave up waiting, so the time is not valid
//
// The waiting kernel polls a word of mapped pinned host memory and gives up after the deadline Close was given,
// so a host that never opens the gate cannot hang the stream. While the gate is closed, the host must not wait
// for the stream (Synchronize, a copy from pageable memory, which may be synchronous): it would wait until the
// deadline. Thread-compatible.
#ifndef KVT_COMMON_STREAM_GATE_H_
#define KVT_COMMON_STREAM_GATE_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cuda_util.h"

namespace kvt {

class StreamGate {
 public:
  // FAILED_PRECONDITION without a usable device.
  static absl::StatusOr<std::unique_ptr<StreamGate>> Create();
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Enqueues on `stream` a kernel that returns once Open() is called or `timeout_ms` (> 0) have passed on the
  // GPU. FAILED_PRECONDITION while a closed gate has not been opened; INVALID_ARGUMENT for a timeout <= 0.
  absl::Status Close(CudaStream stream, int timeout_ms = 2000);
  // Lets the waiting kernel return. Opening an open gate does nothing.
  void Open();
  // Whether the last closing kernel returned because the gate opened: OK, or DEADLINE_EXCEEDED if it gave up
  // first. Valid once the stream has passed that kernel (e.g. after a synchronize or a later event's wait);
  // FAILED_PRECONDITION before any Close.
  absl::Status Passed() const;

 private:
  struct FreeHost {
    void operator()(uint32_t* p) const;
  };
  struct DestroyEvent {
    void operator()(void* e) const;
  };
  StreamGate(std::unique_ptr<uint32_t, FreeHost> words, uint32_t* device_words,
             std::unique_ptr<void, DestroyEvent> passed)
      : words_(std::move(words)), device_words_(device_words), passed_(std::move(passed)) {}
  // Mapped pinned memory: [0] the generation the host has opened; [1] the last generation whose kernel gave up.
  std::unique_ptr<uint32_t, FreeHost> words_;
  uint32_t* device_words_;  // the same words as the device sees them
  // Recorded behind each closing kernel: the destructor waits on it before it frees the words.
  std::unique_ptr<void, DestroyEvent> passed_;
  uint32_t generation_ = 0;  // of the last Close
  bool closed_ = false;
};

}  // namespace kvt

#endif  // KVT_COMMON_STREAM_GATE_H_
