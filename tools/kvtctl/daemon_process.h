// A kvtd started as a child process (kvtctl demo, end-to-end tests): launched with its flags and a ready file,
// waited for until it says where it listens, stopped with SIGTERM (then SIGKILL after a grace period) when the
// object dies. Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_DAEMON_PROCESS_H_
#define KVT_TOOLS_KVTCTL_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvt::kvtctl {

class DaemonProcess {
 public:
  // Runs `kvtd_path` with `flags` plus --ready_file (in `work_dir`) and waits up to `timeout` for it to be up.
  // NOT_FOUND if the binary is missing; UNAVAILABLE (with the tail of its log) if it exits or stays silent.
  // Its stderr goes to `work_dir`/<name>.log.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Launch(const std::string& kvtd_path, const std::string& name,
                                                               const std::vector<std::string>& flags,
                                                               const std::string& work_dir, absl::Duration timeout);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& client_socket() const { return client_socket_; }
  const std::string& peer_address() const { return peer_address_; }
  const std::string& daemon_id() const { return daemon_id_; }
  int metrics_port() const { return metrics_port_; }
  const std::string& log_path() const { return log_path_; }

  // SIGKILL, as a crash would (for failure tests); the destructor then only reaps it.
  void Kill();

 private:
  explicit DaemonProcess(pid_t pid) : pid_(pid) {}

  pid_t pid_;
  bool reaped_ = false;
  std::string client_socket_;
  std::string peer_address_;
  std::string daemon_id_;
  int metrics_port_ = 0;
  std::string log_path_;
};

// Where kvtd is: `flag_value` if given; else next to this executable in a Bazel tree (bazel-bin/server/kvtd
// beside bazel-bin/tools/kvtctl/kvtctl, or in its runfiles); else "kvtd" on PATH. NOT_FOUND saying where it
// looked.
absl::StatusOr<std::string> FindKvtd(const std::string& flag_value);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_DAEMON_PROCESS_H_
