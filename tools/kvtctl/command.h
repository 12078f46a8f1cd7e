// What every kvtctl command group shares: where output goes, and what its exit code means. A command group
// (codec, demo, later bench, stats, watch, timeline) is one file `<group>_command.{h,cc}` exposing a
// `CommandGroup` that kvtctl.cc lists. Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_COMMAND_H_
#define KVT_TOOLS_KVTCTL_COMMAND_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/kvtctl/flag_set.h"

namespace kvt::kvtctl {

// Process exit codes of kvtctl.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed (bad input file, codec error, ...)
inline constexpr int kExitUsage = 2;    // the command line was wrong

// Where a command writes: results to `out` (the table or JSON), progress and errors to `err`.
struct CommandIo {
  std::ostream& out;
  std::ostream& err;
};

struct CommandGroup {
  std::string name;     // the first word after kvtctl, e.g. "codec"
  std::string summary;  // one line for `kvtctl help`
  // Runs the group with the arguments after its name; returns an exit code above.
  std::function<int(const std::vector<std::string>& args, const CommandIo& io)> run;
};

// Prints "kvtctl <command>: <message>" and `usage` to io.err; returns kExitUsage.
int UsageError(const CommandIo& io, const std::string& command, const std::string& message,
               const std::string& usage);

// Parses a subcommand's `args` into `flags`. Returns the exit code when the command must stop here: kExitUsage
// after a usage error or more than `max_positional` positional arguments (message and flags printed to
// io.err), kExitOk after --help (`usage_head` and the flags printed to io.out); nullopt when the command should
// go on, its positional arguments in flags.positional().
std::optional<int> ParseCommandLine(FlagSet& flags, const std::vector<std::string>& args, const CommandIo& io,
                                    const std::string& command, const std::string& usage_head,
                                    size_t max_positional = 0);

// Prints "kvtctl <command>: <status>" to io.err; returns kExitFailure.
int Failure(const CommandIo& io, const std::string& command, const absl::Status& status);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_COMMAND_H_
