#include "transport/bench/perftest_runner.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace kvt::transport {
namespace {

// Resolves a bare program name against fixed system directories (this library reads no environment).
absl::StatusOr<std::string> FindProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) == 0) return program;
    return absl::NotFoundError(absl::StrCat(program, " is not an executable"));
  }
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin"}) {
    std::string path = absl::StrCat(dir, "/", program);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return absl::NotFoundError(absl::StrCat(program, " is not installed (Debian package ucx-utils)"));
}

absl::StatusOr<int> FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return absl::InternalError("cannot find a free TCP port");
  }
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// A child process whose stdout+stderr go to a pipe we read. Killed (SIGKILL) and reaped if still running when
// destroyed.
class Child {
 public:
  static absl::StatusOr<Child> Spawn(const std::string& path, const std::vector<std::string>& args,
                                     const std::vector<std::string>& env) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    std::vector<char*> argv, envp;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid;
    const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (rc != 0) {
      close(fds[0]);
      return absl::InternalError(absl::StrCat("cannot start ", path));
    }
    Child c;
    c.pid_ = pid;
    c.out_fd_ = fds[0];
    return c;
  }
  Child(Child&& o) noexcept : pid_(o.pid_), out_fd_(o.out_fd_) {
    o.pid_ = -1;
    o.out_fd_ = -1;
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
  }

  // Reads output until the child closes it or `deadline`; then reaps it. Returns the exit code.
  absl::StatusOr<int> Finish(absl::Time deadline, std::string* output) {
    char buf[4096];
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("ucx_perftest did not finish in time");
      pollfd p = {out_fd_, POLLIN, 0};
      const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
      if (ready < 0) continue;
      if (ready == 0) continue;
      const ssize_t n = read(out_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      output->append(buf, static_cast<size_t>(n));
    }
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  Child() = default;
  pid_t pid_ = -1;
  int out_fd_ = -1;
};

}  // namespace

absl::StatusOr<double> ParsePerftestBandwidth(const std::string& output) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::ConsumePrefix(&line, "Final:")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    // iterations, latency 50%, average, overall, bandwidth average, overall, message rate average, overall
    double mbps;
    if (f.size() >= 6 && absl::SimpleAtod(f[5], &mbps) && mbps > 0) return mbps * 1024 * 1024;
  }
  return absl::InternalError("no \"Final:\" line with a bandwidth in ucx_perftest's output");
}

absl::StatusOr<double> RunUcxPerftest(const PerftestRun& run) {
  absl::StatusOr<std::string> path = FindProgram(run.program);
  if (!path.ok()) return path.status();
  absl::StatusOr<int> port = FreeTcpPort();
  if (!port.ok()) return port.status();
  // This process's environment (the same UCX libraries, modules and UCX_* settings kvt's own UCX reads), with
  // the transport and devices of the run.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "UCX_TLS=") && !absl::StartsWith(*e, "UCX_NET_DEVICES=")) env.emplace_back(*e);
  }
  env.push_back(absl::StrCat("UCX_TLS=", run.tls));
  env.push_back(absl::StrCat("UCX_NET_DEVICES=", run.net_devices));
  std::vector<std::string> common = {"-t", run.test,
                                     "-s", absl::StrCat(run.message_bytes),
                                     "-n", absl::StrCat(run.iterations),
                                     "-w", absl::StrCat(std::max(10, run.iterations / 20)),
                                     "-p", absl::StrCat(*port)};
  if (run.error_handling) common.push_back("-e");
  const absl::Time deadline = absl::Now() + run.timeout;
  absl::StatusOr<Child> server = Child::Spawn(*path, common, env);
  if (!server.ok()) return server.status();
  std::vector<std::string> client_args = {"127.0.0.1"};
  client_args.insert(client_args.end(), common.begin(), common.end());
  // The server needs a moment to listen; a client that finds nobody exits at once, so try a few times.
  std::string output;
  for (int attempt = 0; attempt < 10; ++attempt) {
    absl::SleepFor(absl::Milliseconds(200));
    absl::StatusOr<Child> client = Child::Spawn(*path, client_args, env);
    if (!client.ok()) return client.status();
    output.clear();
    absl::StatusOr<int> code = client->Finish(deadline, &output);
    if (!code.ok()) return code.status();
    if (*code == 0) {
      std::string server_output;
      server->Finish(deadline, &server_output).IgnoreError();
      return ParsePerftestBandwidth(output);
    }
  }
  return absl::InternalError(absl::StrCat("ucx_perftest client kept failing; last output: ", output.substr(0, 400)));
}

}  // namespace kvt::transport
