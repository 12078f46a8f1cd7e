// kvtctl's dispatcher: `kvtctl <group> [subcommand] [flags]`, `kvtctl help`. The groups are listed in
// kvtctl.cc, one line each. Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_KVTCTL_H_
#define KVT_TOOLS_KVTCTL_KVTCTL_H_

#include <string>
#include <vector>

#include "tools/kvtctl/command.h"

namespace kvt::kvtctl {

// Every command group, in the order `kvtctl help` lists them.
const std::vector<CommandGroup>& CommandGroups();

// Runs kvtctl with `args` (argv without the program name). Returns the process exit code.
int RunKvtctl(const std::vector<std::string>& args, const CommandIo& io);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_KVTCTL_H_
