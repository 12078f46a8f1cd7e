#include "transport/ucx/ucx_transport.h"

#include "transport/internal/engine.h"
#include "transport/ucx/ucx_wire.h"

namespace kvt::transport {

absl::StatusOr<std::unique_ptr<Transport>> NewUcxTransport(const Options& options) {
  auto engine = internal::Engine::Create(
      options, Capabilities{"ucx", options.ucx_tls.empty() ? "all" : options.ucx_tls},
      [options](internal::WireEvents* events,
                std::function<void()> wake) -> absl::StatusOr<std::unique_ptr<internal::Wire>> {
        auto wire = internal::UcxWire::Create(options, events, std::move(wake));
        if (!wire.ok()) return wire.status();
        return std::unique_ptr<internal::Wire>(*std::move(wire));
      });
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<Transport>(*std::move(engine));
}

}  // namespace kvt::transport
