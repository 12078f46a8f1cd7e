// kvtctl: the kvt command-line tool (codec evaluation and round trips, the demo; later bench, stats, watch,
// timeline). All logic is in the command libraries; see kvtctl.h.
#include <iostream>
#include <string>
#include <vector>

#include "tools/kvtctl/kvtctl.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return kvt::kvtctl::RunKvtctl(args, kvt::kvtctl::CommandIo{std::cout, std::cerr});
}
