// A CollectiveWire over plain TCP sockets: a full mesh between the ranks of an explicit peer list
// ("host:port,host:port,...", rank i at entry i). Each rank listens on its own entry's port; rank i connects
// to every rank below it and accepts every rank above it, and each connection opens with a hello naming the
// rank. One reader thread per peer drains its socket into a queue, so a Send never waits on the peer's
// Receive. A peer whose connection closes (its process died) turns into UNAVAILABLE once its queued messages
// are read; every wait has a deadline.
//
// It also bootstraps the UCX backend (ucx_wire.h), which exchanges worker addresses over it.
//   KVT_ASSIGN_OR_RETURN(std::vector<std::string> peers, ParsePeerList("10.0.0.1:7000,10.0.0.2:7000"));
//   KVT_ASSIGN_OR_RETURN(auto wire, TcpWire::Create({.rank = 1, .peers = peers}));
#ifndef KVT_COLLECTIVE_TCP_WIRE_H_
#define KVT_COLLECTIVE_TCP_WIRE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collective/collective_wire.h"

namespace kvt::collective {

// Splits "host:port,host:port" into entries, checking each has a host and a port in 0..65535.
absl::StatusOr<std::vector<std::string>> ParsePeerList(absl::string_view list);

// A listening TCP socket, owned. Move-only.
class TcpListener {
 public:
  // Binds and listens on "host:port"; port 0 picks a free one (see port()).
  static absl::StatusOr<TcpListener> Listen(const std::string& host_port);

  TcpListener(TcpListener&& other) noexcept : fd_(other.fd_), port_(other.port_) { other.fd_ = -1; }
  TcpListener& operator=(TcpListener&& other) noexcept;
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  ~TcpListener();

  int port() const { return port_; }
  int fd() const { return fd_; }

 private:
  TcpListener(int fd, int port) : fd_(fd), port_(port) {}

  int fd_;
  int port_;
};

struct TcpWireOptions {
  // This process's rank: its entry in `peers`.
  int rank = 0;
  // One "host:port" per rank (ParsePeerList).
  std::vector<std::string> peers;
  // How long Create waits for the whole mesh (peers still starting are retried).
  absl::Duration bootstrap_timeout = absl::Seconds(30);
};

class TcpWire : public CollectiveWire {
 public:
  // Listens on peers[rank] and builds the mesh. INVALID_ARGUMENT for bad options, UNAVAILABLE or
  // DEADLINE_EXCEEDED when the mesh does not form within bootstrap_timeout.
  static absl::StatusOr<std::unique_ptr<TcpWire>> Create(const TcpWireOptions& options);
  // As above, on a listener already bound (to port 0 in tests); peers[rank] is then not bound again.
  static absl::StatusOr<std::unique_ptr<TcpWire>> Create(const TcpWireOptions& options, TcpListener listener);

  ~TcpWire() override;

  int rank() const override;
  int world_size() const override;
  absl::Status Send(int dst, absl::Span<const uint8_t> message, absl::Time deadline) override;
  absl::Status Receive(int src, absl::Span<uint8_t> message, absl::Time deadline) override;

 private:
  class Mesh;
  explicit TcpWire(std::unique_ptr<Mesh> mesh);

  std::unique_ptr<Mesh> mesh_;
};

}  // namespace kvt::collective

#endif  // KVT_COLLECTIVE_TCP_WIRE_H_
