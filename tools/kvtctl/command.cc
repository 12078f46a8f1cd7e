#include "tools/kvtctl/command.h"

namespace kvt::kvtctl {

int UsageError(const CommandIo& io, const std::string& command, const std::string& message,
               const std::string& usage) {
  io.err << "kvtctl " << command << ": " << message << "\n\n" << usage;
  return kExitUsage;
}

int Failure(const CommandIo& io, const std::string& command, const absl::Status& status) {
  io.err << "kvtctl " << command << ": " << status.message() << " ("
         << absl::StatusCodeToString(status.code()) << ")\n";
  return kExitFailure;
}

}  // namespace kvt::kvtctl
