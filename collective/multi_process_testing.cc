#include "collective/multi_process_testing.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace kvt::collective {
namespace {

// A record file holds, per record: int32 status code, int64 elapsed nanoseconds, uint64 n, n floats.
void AppendBytes(std::string& out, const void* data, size_t size) {
  out.append(static_cast<const char*>(data), size);
}

std::vector<Record> ReadRecords(const std::string& path) {
  std::vector<Record> records;
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) return records;
  while (true) {
    int32_t code;
    int64_t elapsed_ns;
    uint64_t n;
    if (std::fread(&code, sizeof(code), 1, file.get()) != 1 ||
        std::fread(&elapsed_ns, sizeof(elapsed_ns), 1, file.get()) != 1 ||
        std::fread(&n, sizeof(n), 1, file.get()) != 1) {
      break;
    }
    Record record{static_cast<absl::StatusCode>(code), absl::Nanoseconds(elapsed_ns), std::vector<float>(n)};
    if (std::fread(record.values.data(), sizeof(float), n, file.get()) != n) break;
    records.push_back(std::move(record));
  }
  return records;
}

std::string RecordFileTemplate() {
  std::string dir = ::testing::TempDir();
  if (dir.empty() || dir.back() != '/') dir += '/';
  return absl::StrCat(dir, "forked_rank_XXXXXX");
}

// Waits for rank `rank`'s process `pid`, killing it if it still runs at `give_up`.
absl::Status WaitForRank(int rank, pid_t pid, absl::Time give_up) {
  int wstatus = 0;
  while (true) {
    const pid_t done = waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrFormat("rank %d: waitpid: %s", rank, strerror(errno)));
    }
    if (absl::Now() > give_up) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      return absl::DeadlineExceededError(
          absl::StrFormat("rank %d still ran at the give-up time; killed it", rank));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (WIFEXITED(wstatus)) {
    if (WEXITSTATUS(wstatus) == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrFormat("rank %d exited with code %d", rank, WEXITSTATUS(wstatus)));
  }
  if (WIFSIGNALED(wstatus)) {
    return absl::InternalError(absl::StrFormat("rank %d was killed by signal %d (%s)", rank,
                                               WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus))));
  }
  return absl::InternalError(absl::StrFormat("rank %d ended with wait status %d", rank, wstatus));
}

// A run in which no rank started, each rank's exit saying why.
ForkedRun NotStarted(int world, const absl::Status& why) {
  ForkedRun run;
  for (int r = 0; r < world; ++r) {
    run.exits.push_back(
        absl::Status(why.code(), absl::StrFormat("rank %d did not start: %s", r, why.message())));
  }
  run.records.resize(world);
  return run;
}

}  // namespace

absl::StatusOr<LoopbackListeners> ListenOnLoopback(int world) {
  LoopbackListeners loopback;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1:0");
    if (!listener.ok()) return listener.status();
    loopback.peers.push_back(absl::StrFormat("127.0.0.1:%d", listener->port()));
    loopback.listeners.push_back(std::move(*listener));
  }
  return loopback;
}

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) close(fd_);
}

void RecordWriter::Write(const absl::Status& status, absl::Span<const float> values, absl::Duration elapsed) {
  const int32_t code = static_cast<int32_t>(status.code());
  const int64_t elapsed_ns = absl::ToInt64Nanoseconds(elapsed);
  const uint64_t n = values.size();
  std::string bytes;
  AppendBytes(bytes, &code, sizeof(code));
  AppendBytes(bytes, &elapsed_ns, sizeof(elapsed_ns));
  AppendBytes(bytes, &n, sizeof(n));
  AppendBytes(bytes, values.data(), values.size() * sizeof(float));
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t wrote = write(fd_, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;
    done += static_cast<size_t>(wrote);
  }
}

ForkedRun RunForked(int world, absl::Duration give_up, absl::FunctionRef<int(ForkedRank& self)> body) {
  absl::StatusOr<LoopbackListeners> loopback = ListenOnLoopback(world);
  if (!loopback.ok()) return NotStarted(world, loopback.status());
  std::vector<std::string> paths;
  std::vector<int> fds;
  const auto discard_files = [&] {
    for (int fd : fds) close(fd);
    for (const std::string& path : paths) std::remove(path.c_str());
  };
  for (int r = 0; r < world; ++r) {
    std::string path = RecordFileTemplate();
    const int fd = mkstemp(path.data());
    if (fd < 0) {
      const absl::Status why = absl::InternalError(absl::StrFormat("mkstemp %s: %s", path, strerror(errno)));
      discard_files();
      return NotStarted(world, why);
    }
    paths.push_back(std::move(path));
    fds.push_back(fd);
  }

  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code;
      {
        ForkedRank self{r, loopback->peers, std::move(loopback->listeners[r]), RecordWriter(fds[r])};
        loopback->listeners.clear();  // the other ranks' listeners and record files belong to them
        for (int other = 0; other < world; ++other) {
          if (other != r) close(fds[other]);
        }
        code = body(self);
      }
      _exit(code);
    }
    if (pid < 0) {
      const absl::Status why = absl::InternalError(absl::StrFormat("fork: %s", strerror(errno)));
      for (pid_t child : children) kill(child, SIGKILL);
      for (pid_t child : children) waitpid(child, nullptr, 0);
      discard_files();
      return NotStarted(world, why);
    }
    children.push_back(pid);
  }
  loopback->listeners.clear();
  for (int fd : fds) close(fd);
  fds.clear();

  ForkedRun run;
  const absl::Time deadline = absl::Now() + give_up;
  for (int r = 0; r < world; ++r) run.exits.push_back(WaitForRank(r, children[r], deadline));
  for (const std::string& path : paths) run.records.push_back(ReadRecords(path));
  discard_files();
  return run;
}

}  // namespace kvt::collective
