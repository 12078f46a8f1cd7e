// kvtctl's dispatcher; see kvtctl.h. To add a command group, write <group>_command.{h,cc} and list it here.
#include "tools/kvtctl/kvtctl.h"

#include "absl/strings/str_format.h"
#include "tools/kvtctl/bench_command.h"
#include "tools/kvtctl/codec_command.h"
#include "tools/kvtctl/daemon_commands.h"
#include "tools/kvtctl/demo_command.h"
#include "tools/kvtctl/peers_command.h"
#include "tools/kvtctl/simulate_command.h"

namespace kvt::kvtctl {
namespace {

std::string Help() {
  std::string s = "Usage: kvtctl <command> [subcommand] [--flags]\n\nCommands:\n";
  for (const CommandGroup& g : CommandGroups()) absl::StrAppendFormat(&s, "  %-8s %s\n", g.name, g.summary);
  absl::StrAppendFormat(&s, "  %-8s %s\n", "help", "this list; `kvtctl <command> --help` for a command's flags");
  return s;
}

}  // namespace

const std::vector<CommandGroup>& CommandGroups() {
  static const auto* groups = new std::vector<CommandGroup>{
      CodecCommandGroup(), DemoCommandGroup(),     BenchCommandGroup(),   StatsCommandGroup(),
      WatchCommandGroup(), TimelineCommandGroup(), ProfileCommandGroup(), PeersCommandGroup(), SimulateCommandGroup(),
  };
  return *groups;
}

int RunKvtctl(const std::vector<std::string>& args, const CommandIo& io) {
  if (args.empty()) {
    io.err << Help();
    return kExitUsage;
  }
  const std::string& name = args[0];
  if (name == "help" || name == "--help" || name == "-h") {
    if (args.size() > 1) {
      for (const CommandGroup& g : CommandGroups()) {
        if (g.name == args[1]) return g.run({"--help"}, io);
      }
    }
    io.out << Help();
    return kExitOk;
  }
  for (const CommandGroup& g : CommandGroups()) {
    if (g.name == name) return g.run(std::vector<std::string>(args.begin() + 1, args.end()), io);
  }
  io.err << "kvtctl: unknown command '" << name << "'\n\n" << Help();
  return kExitUsage;
}

}  // namespace kvt::kvtctl
