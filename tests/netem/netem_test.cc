// Network emulation with real kernel shaping: two network namespaces joined by a veth pair, shaped with tc
// (tbf for rate, netem for delay and loss), a kvt UCX endpoint (netem_peer) in each. A kernel without the
// netem qdisc skips the delay-and-loss case, saying so. Traffic flows only between
// the 10.x addresses inside the namespaces this test makes, and the test removes them when it ends.
// Needs root and `ip netns`; where the machine does not allow namespaces the test skips and says why.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <utility>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvt::transport {
namespace {

constexpr char kPeer[] = "tests/netem/netem_peer";
constexpr absl::Duration kRunLimit = absl::Seconds(90);

// Runs argv to completion; returns its exit code and puts stdout+stderr in *output.
int Run(const std::vector<std::string>& argv, std::string* output = nullptr) {
  std::string cmd;
  for (const std::string& a : argv) absl::StrAppend(&cmd, cmd.empty() ? "" : " ", a);
  absl::StrAppend(&cmd, " 2>&1");
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[1024];
  std::string out;
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  const int status = pclose(f);
  if (output != nullptr) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A helper process with a pipe to its stdin and one from its stdout. Killed and reaped when destroyed.
class Peer {
 public:
  explicit Peer(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // UCX_MEM_EVENTS=no: kvt registers no memory with UCX, and UCX's memory hooks break sanitizer builds.
    char* envp[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), const_cast<char*>("UCX_MEM_EVENTS=no"),
                    nullptr};
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Peer() {
    CloseStdin();
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) close(stdout_);
  }
  bool started() const { return pid_ > 0; }
  void CloseStdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }
  // Next line starting with one of `prefixes` ("" on timeout or end of output); other lines are kept in log().
  std::string ReadLine(const std::vector<std::string>& prefixes, absl::Time deadline) {
    while (true) {
      size_t nl;
      while ((nl = buffer_.find('\n')) != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        for (const std::string& p : prefixes) {
          if (absl::StartsWith(line, p)) return line;
        }
        absl::StrAppend(&log_, line, "\n");
      }
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (ms <= 0) return "";
      pollfd p = {stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(stdout_, buf, sizeof(buf));
      if (n <= 0) return "";
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }
  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string buffer_;
  std::string log_;
};

// Two namespaces joined by a veth pair (kvta in A, kvtb in B), addresses 10.213.N.1 and .2. Removed on
// destruction, which also removes the veth pair.
class NamespacePair {
 public:
  NamespacePair() {
    static int counter = 0;
    const int id = getpid() % 200;
    a_ = absl::StrCat("kvt-netem-", getpid(), "-", counter, "-a");
    b_ = absl::StrCat("kvt-netem-", getpid(), "-", counter, "-b");
    subnet_ = absl::StrCat("10.213.", (id + 7 * counter) % 250, ".");
    ++counter;
  }
  ~NamespacePair() {
    for (const std::string& ns : created_) Run({"ip", "netns", "del", ns});
  }

  // Returns "" when the namespaces are up, else why not (the caller skips on a permission problem).
  std::string SetUp(bool* permission_problem) {
    std::string out;
    *permission_problem = false;
    for (const std::string& ns : {a_, b_}) {
      if (Run({"ip", "netns", "add", ns}, &out) != 0) {
        *permission_problem = true;
        return absl::StrCat("`ip netns add` failed (needs root and network namespaces): ", out);
      }
      created_.push_back(ns);
    }
    const std::vector<std::vector<std::string>> steps = {
        {"ip", "-n", a_, "link", "add", "kvta", "type", "veth", "peer", "name", "kvtb", "netns", b_},
        {"ip", "-n", a_, "addr", "add", address_a() + "/24", "dev", "kvta"},
        {"ip", "-n", b_, "addr", "add", address_b() + "/24", "dev", "kvtb"},
        {"ip", "-n", a_, "link", "set", "kvta", "up"},
        {"ip", "-n", b_, "link", "set", "kvtb", "up"},
        {"ip", "-n", a_, "link", "set", "lo", "up"},
        {"ip", "-n", b_, "link", "set", "lo", "up"},
    };
    for (const auto& step : steps) {
      if (Run(step, &out) != 0) return absl::StrCat(absl::StrJoin(step, " "), ": ", out);
    }
    // A veth end reports carrier a moment after both ends are up; UCX ignores an interface without it.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    for (const auto& [ns, dev] : {std::make_pair(a_, "kvta"), std::make_pair(b_, "kvtb")}) {
      while (Run({"ip", "-n", ns, "link", "show", "dev", dev}, &out) != 0 ||
             !absl::StrContains(out, "state UP")) {
        if (absl::Now() > give_up) return absl::StrCat(dev, " never came up: ", out);
        absl::SleepFor(absl::Milliseconds(50));
      }
    }
    return "";
  }
  // Runs tc inside namespace A on kvta (traffic from A to B).
  std::string Shape(const std::vector<std::string>& qdisc_args) {
    std::vector<std::string> cmd = {"ip", "netns", "exec", a_, "tc", "qdisc", "add", "dev", "kvta"};
    cmd.insert(cmd.end(), qdisc_args.begin(), qdisc_args.end());
    std::string out;
    if (Run(cmd, &out) != 0) return absl::StrCat(absl::StrJoin(cmd, " "), ": ", out);
    return "";
  }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  std::string address_a() const { return subnet_ + "1"; }
  std::string address_b() const { return subnet_ + "2"; }

 private:
  std::string a_, b_, subnet_;
  std::vector<std::string> created_;
};

struct Outcome {
  nlohmann::json sender;
  nlohmann::json receiver;
};

// Receiver in B, sender in A; returns both RESULT documents. Fails the test on any error.
// `sender_flags` go to the sender only (e.g. kvt's own rate limit).
void RunTransfer(NamespacePair& ns, int anchor_kib, int residual_kib, const std::vector<std::string>& sender_flags,
                 Outcome* outcome) {
  const absl::Time deadline = absl::Now() + kRunLimit;
  Peer receiver({"/usr/sbin/ip", "netns", "exec", ns.b(), kPeer, "--role=receiver", "--net_devices=kvtb",
                 absl::StrCat("--anchor_kib=", anchor_kib), absl::StrCat("--residual_kib=", residual_kib)});
  ASSERT_TRUE(receiver.started());
  const std::string address = receiver.ReadLine({"ADDRESS ", "ERROR "}, deadline);
  ASSERT_TRUE(absl::StartsWith(address, "ADDRESS ")) << address << receiver.log();
  std::vector<std::string> sender_args = {"/usr/sbin/ip", "netns", "exec", ns.a(), kPeer, "--role=sender",
                                         "--net_devices=kvta", absl::StrCat("--peer=", address.substr(8)),
                                         absl::StrCat("--anchor_kib=", anchor_kib),
                                         absl::StrCat("--residual_kib=", residual_kib)};
  sender_args.insert(sender_args.end(), sender_flags.begin(), sender_flags.end());
  Peer sender(sender_args);
  ASSERT_TRUE(sender.started());
  const std::string sent = sender.ReadLine({"RESULT ", "ERROR "}, deadline);
  ASSERT_TRUE(absl::StartsWith(sent, "RESULT ")) << sent << sender.log();
  const std::string received = receiver.ReadLine({"RESULT ", "ERROR "}, deadline);
  ASSERT_TRUE(absl::StartsWith(received, "RESULT ")) << received << receiver.log();
  receiver.CloseStdin();
  outcome->sender = nlohmann::json::parse(sent.substr(7));
  outcome->receiver = nlohmann::json::parse(received.substr(7));
  std::printf("sender: %s\nreceiver: %s\n", outcome->sender.dump().c_str(), outcome->receiver.dump().c_str());
}

class NetemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network emulation needs root (network namespaces, tc); not run";
    bool permission_problem = false;
    const std::string error = ns_.SetUp(&permission_problem);
    if (permission_problem) GTEST_SKIP() << "network namespaces are not allowed here, not run: " << error;
    ASSERT_EQ(error, "");
  }
  NamespacePair ns_;
};

TEST_F(NetemTest, AnchorGoesFirstAndIntactThroughAKernelShapedLink) {
  // 200 Mbit/s, shaped by the kernel's token bucket filter on A's side of the veth pair.
  ASSERT_EQ(ns_.Shape({"root", "tbf", "rate", "200mbit", "burst", "256kb", "latency", "100ms"}), "");
  // kvt paces just under the bottleneck with a small window, so the backlog waits in kvt's lanes (where the
  // anchor can overtake it), not in the kernel's queues (where it cannot).
  Outcome o;
  RunTransfer(ns_, /*anchor_kib=*/4096, /*residual_kib=*/12288, {"--rate_mbit=180", "--window_kib=2048"}, &o);
  if (HasFatalFailure()) return;
  EXPECT_EQ(o.sender["anchor_status"], "OK");
  EXPECT_EQ(o.sender["residual_status"], "OK");
  EXPECT_EQ(o.receiver["anchor_intact"], true);
  EXPECT_EQ(o.receiver["residual_intact"], true);
  EXPECT_EQ(o.receiver["rejected"], 0);
  // Queued after the residual, the anchor still finished first.
  EXPECT_EQ(o.receiver["anchor_done_before_residual"], true);
  const double rate = 200e6 / 8;
  const double total_seconds = o.sender["total_seconds"];
  const double goodput = o.sender["bytes"].get<double>() / total_seconds;
  EXPECT_LT(goodput, 1.1 * rate) << total_seconds << " s";
  EXPECT_GT(goodput, 0.3 * rate) << total_seconds << " s";
  // The anchor took about its own bytes' time at the shaped rate (generous: noisy CI).
  EXPECT_LT(o.sender["anchor_seconds"].get<double>(), 2.0 * (4096.0 * 1024 / rate) + 1.0);
}

TEST_F(NetemTest, KernelShaperSetsThePaceOfAnUnthrottledSender) {
  // kvt does not pace here; only the kernel's tbf at 100 Mbit/s can hold the transfer to that rate.
  ASSERT_EQ(ns_.Shape({"root", "tbf", "rate", "100mbit", "burst", "128kb", "latency", "100ms"}), "");
  Outcome o;
  RunTransfer(ns_, /*anchor_kib=*/2048, /*residual_kib=*/4096, {}, &o);
  if (HasFatalFailure()) return;
  EXPECT_EQ(o.sender["anchor_status"], "OK");
  EXPECT_EQ(o.sender["residual_status"], "OK");
  EXPECT_EQ(o.receiver["anchor_intact"], true);
  EXPECT_EQ(o.receiver["residual_intact"], true);
  const double rate = 100e6 / 8;
  const double total_seconds = o.sender["total_seconds"];
  const double goodput = o.sender["bytes"].get<double>() / total_seconds;
  EXPECT_LT(goodput, 1.1 * rate) << total_seconds << " s";
  EXPECT_GT(goodput, 0.3 * rate) << total_seconds << " s";
}

TEST_F(NetemTest, StreamsArriveIntactThroughDelayAndLoss) {
  const std::string shaped = ns_.Shape({"root", "netem", "delay", "5ms", "loss", "1%"});
  if (absl::StrContains(shaped, "qdisc kind is unknown")) {
    GTEST_SKIP() << "this kernel has no netem qdisc (sch_netem), so delay and loss cannot be emulated; not run: "
                 << shaped;
  }
  ASSERT_EQ(shaped, "");
  Outcome o;
  RunTransfer(ns_, /*anchor_kib=*/2048, /*residual_kib=*/6144, {}, &o);
  if (HasFatalFailure()) return;
  EXPECT_EQ(o.sender["anchor_status"], "OK");
  EXPECT_EQ(o.sender["residual_status"], "OK");
  EXPECT_EQ(o.receiver["anchor_intact"], true);
  EXPECT_EQ(o.receiver["residual_intact"], true);
  EXPECT_EQ(o.receiver["rejected"], 0);
}

}  // namespace
}  // namespace kvt::transport
