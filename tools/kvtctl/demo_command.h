// `kvtctl demo`: the main job behind `./kvt demo` (see progressive_demo.h): two kvtd daemons on loopback, one
// transfer per scheme over a rate-limited link, then a table (or --json) of bytes, time to anchor and to full
// precision, attention vNMSE, and the ratios to int8; and a timeline SVG. Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_DEMO_COMMAND_H_
#define KVT_TOOLS_KVTCTL_DEMO_COMMAND_H_

#include "tools/kvtctl/command.h"

namespace kvt::kvtctl {

CommandGroup DemoCommandGroup();

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_DEMO_COMMAND_H_
