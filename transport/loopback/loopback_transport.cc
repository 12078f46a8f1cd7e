#include "transport/loopback/loopback_transport.h"

#include "transport/internal/engine.h"
#include "transport/loopback/loopback_wire.h"

namespace kvt::transport {

absl::StatusOr<std::unique_ptr<Transport>> NewLoopbackTransport(const Options& options) {
  auto engine = internal::Engine::Create(
      options, Capabilities{"loopback", "in-process"},
      [](internal::WireEvents* events,
         std::function<void()> wake) -> absl::StatusOr<std::unique_ptr<internal::Wire>> {
        return std::make_unique<internal::LoopbackWire>(events, std::move(wake));
      });
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<Transport>(*std::move(engine));
}

}  // namespace kvt::transport
