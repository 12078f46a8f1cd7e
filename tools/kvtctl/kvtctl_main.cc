// kvtctl: the kvt command-line tool (codec evaluation and round trips, the demo; later bench, stats, watch,
// timeline). All logic is in the command libraries; see kvtctl.h.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "tools/kvtctl/kvtctl.h"

int main(int argc, char** argv) {
  // kvtctl prints what it was asked for; the in-process transports of `bench transport` and the demo's data-plane
  // reference log only what went wrong (KVT_LOG_LEVEL=info or debug shows the rest).
  const char* level = std::getenv("KVT_LOG_LEVEL");
  if (level == nullptr || !kvt::SetLogLevel(level)) kvt::SetLogLevel("warn");
  const std::vector<std::string> args(argv + 1, argv + argc);
  return kvt::kvtctl::RunKvtctl(args, kvt::kvtctl::CommandIo{std::cout, std::cerr});
}
