// Test support for collectives across real processes. RunForked forks one process per rank, each given a
// TcpListener already bound to a free port on 127.0.0.1 (so the ranks form a TcpWire mesh without racing for
// ports) and a RecordWriter; the parent waits for every rank, kills any still running at the give-up time,
// and returns each rank's exit and the records it wrote. ListenOnLoopback also serves in-process meshes.
//
// RunForked forks: call it from the test's main thread, while no other thread holds a lock the ranks need.
//   ForkedRun run = RunForked(3, absl::Seconds(60), [](ForkedRank& self) {
//     auto wire = TcpWire::Create({.rank = self.rank, .peers = self.peers}, std::move(self.listener));
//     if (!wire.ok()) return 2;
//     ...
//     self.records.Write(status, out);
//     return 0;
//   });
//   for (const absl::Status& exit : run.exits) EXPECT_TRUE(exit.ok()) << exit;
#ifndef KVT_COLLECTIVE_MULTI_PROCESS_TESTING_H_
#define KVT_COLLECTIVE_MULTI_PROCESS_TESTING_H_

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collective/tcp_wire.h"

namespace kvt::collective {

// One listener per rank, each bound to a free port on 127.0.0.1, and the peer list ("127.0.0.1:port", in
// rank order) that names them.
struct LoopbackListeners {
  std::vector<TcpListener> listeners;
  std::vector<std::string> peers;
};

// Binds `world` listeners; the error of the first bind that fails.
absl::StatusOr<LoopbackListeners> ListenOnLoopback(int world);

// What a rank wrote: a status code, how long the step took (zero unless the writer said) and its values.
struct Record {
  absl::StatusCode code = absl::StatusCode::kOk;
  absl::Duration elapsed;
  std::vector<float> values;
};

// Appends records to a rank's file, unbuffered: what Write returned from is in the file even if the process
// then calls _exit or is killed. Owns its file descriptor. Move-only.
class RecordWriter {
 public:
  // Takes ownership of `fd`, a file open for writing.
  explicit RecordWriter(int fd) : fd_(fd) {}
  RecordWriter(RecordWriter&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RecordWriter& operator=(RecordWriter&&) = delete;
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;
  ~RecordWriter();

  // Appends one record. A write that fails shows in the parent as records missing from the end.
  void Write(const absl::Status& status, absl::Span<const float> values,
             absl::Duration elapsed = absl::ZeroDuration());

 private:
  int fd_;
};

// What RunForked hands the body in rank `rank`'s process.
struct ForkedRank {
  int rank;
  // Every rank's listener address, in rank order.
  std::vector<std::string> peers;
  // This rank's listener, bound to peers[rank] (move it into TcpWire::Create); the other ranks' are closed.
  TcpListener listener;
  RecordWriter records;
};

struct ForkedRun {
  // Per rank: OK when its process exited with 0; INTERNAL naming the exit code or signal otherwise;
  // DEADLINE_EXCEEDED when it still ran at the give-up time and was killed; when the run could not start
  // (no listener, record file or fork), that error for every rank. Each message names the rank.
  std::vector<absl::Status> exits;
  // Per rank: the records it wrote, in order (empty when the run could not start).
  std::vector<std::vector<Record>> records;
};

// Forks `world` processes; the one for rank r runs body(self) with self.rank == r and exits (_exit) with
// what it returns. Waits until every process has ended or until `give_up` after the last fork, when it kills
// (SIGKILL) those still running. The record files live in ::testing::TempDir() and are removed before it
// returns.
ForkedRun RunForked(int world, absl::Duration give_up, absl::FunctionRef<int(ForkedRank& self)> body);

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_MULTI_PROCESS_TESTING_H_
