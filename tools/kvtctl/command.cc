#include "tools/kvtctl/command.h"

#include "absl/strings/str_cat.h"

namespace kvt::kvtctl {

int UsageError(const CommandIo& io, const std::string& command, const std::string& message,
               const std::string& usage) {
  io.err << "kvtctl " << command << ": " << message << "\n\n" << usage;
  return kExitUsage;
}

std::optional<int> ParseCommandLine(FlagSet& flags, const std::vector<std::string>& args, const CommandIo& io,
                                    const std::string& command, const std::string& usage_head,
                                    size_t max_positional) {
  if (absl::Status st = flags.Parse(args); !st.ok()) {
    return UsageError(io, command, std::string(st.message()), flags.Usage());
  }
  if (flags.help_requested()) {
    io.out << usage_head << "\n" << flags.Usage();
    return kExitOk;
  }
  if (flags.positional().size() > max_positional) {
    return UsageError(io, command,
                      absl::StrCat("unexpected argument '", flags.positional()[max_positional], "'"),
                      flags.Usage());
  }
  return std::nullopt;
}

int Failure(const CommandIo& io, const std::string& command, const absl::Status& status) {
  io.err << "kvtctl " << command << ": " << status.message() << " ("
         << absl::StatusCodeToString(status.code()) << ")\n";
  return kExitFailure;
}

}  // namespace kvt::kvtctl
