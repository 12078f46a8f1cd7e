// `kvtctl demo`: the main job behind `./kvt demo`. Until the kvtd daemons exist it is the codec-only demo: the
// codec evaluation on a synthetic Llama-3.1-8B-shaped KV cache, small enough to finish in well under a minute
// on two cores. Accepts and ignores --kvtd=PATH (./kvt passes the daemon's path). Thread-compatible.
#ifndef KVT_TOOLS_KVTCTL_DEMO_COMMAND_H_
#define KVT_TOOLS_KVTCTL_DEMO_COMMAND_H_

#include "tools/kvtctl/command.h"

namespace kvt::kvtctl {

CommandGroup DemoCommandGroup();

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_DEMO_COMMAND_H_
