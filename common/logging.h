// The one logging header of kvt: spdlog, one named logger per module ("codec", "transport", "server", ...).
// Thread-safe. Never log per chunk on the data path.
//   kvt::Logger("transport")->warn("peer {} stalled for {} ms", peer, ms);
#ifndef KVT_COMMON_LOGGING_H_
#define KVT_COMMON_LOGGING_H_

#include <memory>
#include <string>

#include "spdlog/spdlog.h"

namespace kvt {

// Returns the logger for `module`, creating it (stderr, colour when a terminal) on first use.
std::shared_ptr<spdlog::logger> Logger(const std::string& module);

// Sets the level of every existing and future kvt logger ("trace", "debug", "info", "warn", "error", "off").
// Returns false for an unknown level name.
bool SetLogLevel(const std::string& level);

}  // namespace kvt

#endif  // KVT_COMMON_LOGGING_H_
