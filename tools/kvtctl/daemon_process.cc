#include "tools/kvtctl/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace kvt::kvtctl {
namespace {

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string Tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  return text.size() > max_bytes ? text.substr(text.size() - max_bytes) : text;
}

// Waits for `pid` to exit for up to `timeout`; returns whether it did.
bool WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace

absl::StatusOr<std::string> FindKvtd(const std::string& flag_value) {
  if (!flag_value.empty()) {
    if (Executable(flag_value)) return flag_value;
    return absl::NotFoundError(absl::StrCat("--kvtd ", flag_value, " is not an executable file"));
  }
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::vector<std::string> tried;
  if (n > 0) {
    const std::string exe(self, n);
    const std::string dir = exe.substr(0, exe.rfind('/'));
    for (const std::string& candidate : {dir + "/../../server/kvtd", exe + ".runfiles/kvt/server/kvtd",
                                         dir + "/kvtd"}) {
      tried.push_back(candidate);
      if (Executable(candidate)) return candidate;
    }
  }
  const char* path = getenv("PATH");
  for (absl::string_view d : absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(d, "/kvtd");
    if (Executable(candidate)) return candidate;
  }
  tried.push_back("$PATH");
  return absl::NotFoundError(absl::StrCat("kvtd not found (looked in ", absl::StrJoin(tried, ", "),
                                          "); build it with `bazel build -c opt //server:kvtd` or pass --kvtd"));
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Launch(const std::string& kvtd_path,
                                                                     const std::string& name,
                                                                     const std::vector<std::string>& flags,
                                                                     const std::string& work_dir,
                                                                     absl::Duration timeout) {
  if (!Executable(kvtd_path)) return absl::NotFoundError(absl::StrCat(kvtd_path, " is not an executable file"));
  const std::string ready = absl::StrCat(work_dir, "/", name, ".ready.json");
  const std::string log = absl::StrCat(work_dir, "/", name, ".log");
  unlink(ready.c_str());
  std::vector<std::string> args = {kvtd_path};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back(absl::StrCat("--ready_file=", ready));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot create ", log, ": ", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  std::unique_ptr<DaemonProcess> process(new DaemonProcess(pid));
  process->log_path_ = log;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::ifstream in(ready);
    if (in) {
      nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.is_object()) {
        process->client_socket_ = j.value("client_socket", "");
        process->peer_address_ = j.value("peer_address", "");
        process->daemon_id_ = j.value("daemon_id", "");
        process->metrics_port_ = j.value("metrics_port", 0);
        return process;
      }
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->reaped_ = true;
      return absl::UnavailableError(absl::StrCat("kvtd ", name, " exited during start-up; its log (", log,
                                                 ") ends with:\n", Tail(log, 2000)));
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("kvtd ", name, " did not come up within ",
                                                 absl::FormatDuration(timeout), "; its log (", log, "):\n",
                                                 Tail(log, 2000)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void DaemonProcess::Kill() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  WaitExit(pid_, absl::Seconds(5));
  reaped_ = true;
}

DaemonProcess::~DaemonProcess() {
  if (reaped_) return;
  kill(pid_, SIGTERM);
  if (!WaitExit(pid_, absl::Seconds(10))) {
    kill(pid_, SIGKILL);
    WaitExit(pid_, absl::Seconds(5));
  }
}

}  // namespace kvt::kvtctl
