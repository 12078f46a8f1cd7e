#include "collective/tcp_wire.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/mutex.h"
#include "common/status_macros.h"

namespace kvt::collective {
namespace {

constexpr uint32_t kHelloMagic = 0x4b565443;  // "KVTC"
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 34;

struct HostPort {
  std::string host;
  std::string port;
};

absl::StatusOr<HostPort> SplitHostPort(absl::string_view entry) {
  const size_t colon = entry.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("peer \"%s\" is not host:port", entry));
  }
  HostPort hp{std::string(entry.substr(0, colon)), std::string(entry.substr(colon + 1))};
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  int port;
  if (!absl::SimpleAtoi(hp.port, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat("peer \"%s\" has no port in 0..65535", entry));
  }
  return hp;
}

absl::Status ErrnoStatus(absl::string_view what, int err) {
  const std::string message = absl::StrFormat("%s: %s", what, std::strerror(err));
  switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ECONNREFUSED:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ETIMEDOUT:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

// Milliseconds left until `deadline`, for poll(); 0 once passed.
int PollTimeoutMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

absl::Status WaitFd(int fd, short events, absl::Time deadline, absl::string_view what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, PollTimeoutMs(deadline));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return ErrnoStatus(what, errno);
    if (n == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat("%s: deadline passed", what));
    }
  }
}

// Writes all of `bytes` to a non-blocking-capable socket by `deadline`.
absl::Status WriteAll(int fd, const uint8_t* bytes, size_t size, absl::Time deadline,
                      absl::string_view what) {
  while (size > 0) {
    const ssize_t n = send(fd, bytes, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes += n;
      size -= n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      KVT_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, what));
      continue;
    }
    return ErrnoStatus(what, n < 0 ? errno : EPIPE);
  }
  return absl::OkStatus();
}

// Reads exactly `size` bytes, blocking (the reader threads) or by `deadline` (bootstrap). End of stream is
// UNAVAILABLE.
absl::Status ReadAll(int fd, uint8_t* bytes, size_t size, absl::Time deadline, absl::string_view what) {
  while (size > 0) {
    if (deadline != absl::InfiniteFuture()) KVT_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, what));
    const ssize_t n = recv(fd, bytes, size, 0);
    if (n > 0) {
      bytes += n;
      size -= n;
      continue;
    }
    if (n == 0) return absl::UnavailableError(absl::StrFormat("%s: connection closed", what));
    if (errno == EINTR || errno == EAGAIN) continue;
    return ErrnoStatus(what, errno);
  }
  return absl::OkStatus();
}

void CloseFd(int fd) {
  if (fd >= 0) close(fd);
}

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t world_size;
};

// Connects to `entry`, retrying refused connections (the peer may still be starting) until `deadline`.
absl::StatusOr<int> ConnectWithRetry(const std::string& entry, absl::Time deadline) {
  KVT_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(entry));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrFormat("resolving %s: %s", entry, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(found, freeaddrinfo);
  absl::Status last = absl::UnavailableError(absl::StrFormat("no address for %s", entry));
  while (true) {
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last = ErrnoStatus("socket", errno);
        continue;
      }
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
      }
      last = ErrnoStatus(absl::StrFormat("connecting to %s", entry), errno);
      CloseFd(fd);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat("bootstrap deadline passed: %s", last.message()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParsePeerList(absl::string_view list) {
  std::vector<std::string> peers;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    KVT_RETURN_IF_ERROR(SplitHostPort(entry).status());
    peers.emplace_back(entry);
  }
  return peers;
}

absl::StatusOr<TcpListener> TcpListener::Listen(const std::string& host_port) {
  KVT_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(host_port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("resolving %s: %s", host_port, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(found, freeaddrinfo);
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) return ErrnoStatus("socket", errno);
  TcpListener listener(fd, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    return ErrnoStatus(absl::StrFormat("binding %s", host_port), errno);
  }
  if (listen(fd, 128) != 0) return ErrnoStatus(absl::StrFormat("listening on %s", host_port), errno);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return ErrnoStatus("getsockname", errno);
  listener.port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                              : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return listener;
}

TcpListener& TcpListener::operator=(TcpListener&& other) noexcept {
  if (this != &other) {
    CloseFd(fd_);
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

TcpListener::~TcpListener() { CloseFd(fd_); }

// The sockets to every peer and their reader threads. Invariant: a peer's inbox holds whole messages in
// arrival order; `closed` turns non-OK once, when its reader stops, and no message is queued after that.
class TcpWire::Mesh {
 public:
  Mesh(int rank, int world_size) : rank_(rank), world_size_(world_size), peers_(world_size) {}

  ~Mesh() {
    for (Peer& peer : peers_) {
      if (peer.fd >= 0) shutdown(peer.fd, SHUT_RDWR);
    }
    for (Peer& peer : peers_) {
      if (peer.reader.joinable()) peer.reader.join();
      CloseFd(peer.fd);
    }
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  absl::Status Bootstrap(const std::vector<std::string>& entries, const TcpListener& listener,
                         absl::Time deadline) {
    const Hello hello{kHelloMagic, static_cast<uint32_t>(rank_), static_cast<uint32_t>(world_size_)};
    for (int peer = 0; peer < rank_; ++peer) {
      KVT_ASSIGN_OR_RETURN(peers_[peer].fd, ConnectWithRetry(entries[peer], deadline));
      KVT_RETURN_IF_ERROR(WriteAll(peers_[peer].fd, reinterpret_cast<const uint8_t*>(&hello), sizeof(hello),
                                   deadline, "sending hello"));
    }
    for (int awaited = world_size_ - rank_ - 1; awaited > 0;) {
      KVT_RETURN_IF_ERROR(WaitFd(listener.fd(), POLLIN, deadline,
                                 absl::StrFormat("rank %d waiting for ranks above it", rank_)));
      const int fd = accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
        return ErrnoStatus("accept", errno);
      }
      Hello theirs{};
      absl::Status read = ReadAll(fd, reinterpret_cast<uint8_t*>(&theirs), sizeof(theirs), deadline, "hello");
      const int from = static_cast<int>(theirs.rank);
      if (read.ok() &&
          (theirs.magic != kHelloMagic || theirs.world_size != static_cast<uint32_t>(world_size_) ||
           from <= rank_ || from >= world_size_ || peers_[from].fd >= 0)) {
        read = absl::InvalidArgumentError(
            absl::StrFormat("rank %d got a bad hello (magic %x, rank %d, world size %d)", rank_, theirs.magic,
                            from, theirs.world_size));
      }
      if (!read.ok()) {
        CloseFd(fd);
        return read;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      peers_[from].fd = fd;
      --awaited;
    }
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer != rank_) peers_[peer].reader = std::thread([this, peer] { ReadLoop(peer); });
    }
    return absl::OkStatus();
  }

  absl::Status Send(int dst, absl::Span<const uint8_t> message, absl::Time deadline) {
    KVT_RETURN_IF_ERROR(CheckPeer(dst));
    Peer& peer = peers_[dst];
    if (!peer.send_error.ok()) return peer.send_error;
    const uint64_t length = message.size();
    const std::string what = absl::StrFormat("rank %d sending to rank %d", rank_, dst);
    absl::Status status =
        WriteAll(peer.fd, reinterpret_cast<const uint8_t*>(&length), sizeof(length), deadline, what);
    if (status.ok()) status = WriteAll(peer.fd, message.data(), message.size(), deadline, what);
    // A frame cut short leaves the stream unusable.
    if (!status.ok()) peer.send_error = status;
    return status;
  }

  absl::Status Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) {
    KVT_RETURN_IF_ERROR(CheckPeer(src));
    Peer& peer = peers_[src];
    std::vector<uint8_t> front;
    {
      MutexLock lock(&mu_);
      const bool ready = mu_.AwaitWithDeadline(
          [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !peer.inbox.empty() || !peer.closed.ok(); },
          deadline);
      if (!ready) {
        return absl::DeadlineExceededError(
            absl::StrFormat("rank %d: nothing from rank %d by the deadline", rank_, src));
      }
      if (peer.inbox.empty()) return peer.closed;
      front = std::move(peer.inbox.front());
      peer.inbox.pop_front();
    }
    if (front.size() != message.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d sent rank %d %d bytes where %d were expected", src, rank_, front.size(), message.size()));
    }
    if (!front.empty()) std::memcpy(message.data(), front.data(), front.size());
    return absl::OkStatus();
  }

 private:
  struct Peer {
    // Constant after Bootstrap
    int fd = -1;
    std::thread reader;
    // Used by the one sending thread only
    absl::Status send_error;
    // Protected by Mesh::mu_
    std::deque<std::vector<uint8_t>> inbox;
    absl::Status closed;
  };

  absl::Status CheckPeer(int peer) const {
    if (peer < 0 || peer >= world_size_ || peer == rank_) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d has no peer %d", rank_, peer));
    }
    return absl::OkStatus();
  }

  void ReadLoop(int src) {
    Peer& peer = peers_[src];
    const std::string what = absl::StrFormat("rank %d reading from rank %d", rank_, src);
    absl::Status status;
    while (true) {
      uint64_t length = 0;
      status =
          ReadAll(peer.fd, reinterpret_cast<uint8_t*>(&length), sizeof(length), absl::InfiniteFuture(), what);
      if (!status.ok()) break;
      if (length > kMaxMessageBytes) {
        status = absl::DataLossError(absl::StrFormat("%s: message of %d bytes", what, length));
        break;
      }
      std::vector<uint8_t> message(length);
      status = ReadAll(peer.fd, message.data(), length, absl::InfiniteFuture(), what);
      if (!status.ok()) break;
      MutexLock lock(&mu_);
      peer.inbox.push_back(std::move(message));
    }
    if (status.code() != absl::StatusCode::kUnavailable && status.code() != absl::StatusCode::kDataLoss) {
      status = absl::UnavailableError(status.message());
    }
    MutexLock lock(&mu_);
    peer.closed = absl::UnavailableError(absl::StrFormat("rank %d is gone (%s)", src, status.message()));
  }

  // Constant after construction
  const int rank_;
  const int world_size_;

  Mutex mu_;
  std::vector<Peer> peers_;  // inbox and closed of each are protected by mu_
};

absl::StatusOr<std::unique_ptr<TcpWire>> TcpWire::Create(const TcpWireOptions& options) {
  if (options.rank < 0 || options.rank >= static_cast<int>(options.peers.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d is not in a peer list of %d", options.rank, options.peers.size()));
  }
  KVT_ASSIGN_OR_RETURN(TcpListener listener, TcpListener::Listen(options.peers[options.rank]));
  return Create(options, std::move(listener));
}

absl::StatusOr<std::unique_ptr<TcpWire>> TcpWire::Create(const TcpWireOptions& options,
                                                         TcpListener listener) {
  const int world_size = static_cast<int>(options.peers.size());
  if (options.rank < 0 || options.rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d is not in a peer list of %d", options.rank, world_size));
  }
  for (const std::string& entry : options.peers) KVT_RETURN_IF_ERROR(SplitHostPort(entry).status());
  auto mesh = std::make_unique<Mesh>(options.rank, world_size);
  KVT_RETURN_IF_ERROR(mesh->Bootstrap(options.peers, listener, absl::Now() + options.bootstrap_timeout));
  return std::unique_ptr<TcpWire>(new TcpWire(std::move(mesh)));
}

TcpWire::TcpWire(std::unique_ptr<Mesh> mesh) : mesh_(std::move(mesh)) {}
TcpWire::~TcpWire() = default;

int TcpWire::rank() const { return mesh_->rank(); }
int TcpWire::world_size() const { return mesh_->world_size(); }

absl::Status TcpWire::Send(int dst, absl::Span<const uint8_t> message, absl::Time deadline) {
  return mesh_->Send(dst, message, deadline);
}

absl::Status TcpWire::Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) {
  return mesh_->Receive(src, message, deadline);
}

}  // namespace kvt::collective
