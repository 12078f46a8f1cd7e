// `kvtctl peers`: the daemons registered in etcd (kvtd --etcd_endpoints), one line each, or JSON.
//
//   kvtctl peers --etcd 127.0.0.1:2379 [--prefix /kvt] [--json]
#ifndef KVT_TOOLS_KVTCTL_PEERS_COMMAND_H_
#define KVT_TOOLS_KVTCTL_PEERS_COMMAND_H_

#include <string>
#include <vector>

#include "proto/kvt/v1/registry.pb.h"
#include "tools/kvtctl/command.h"

namespace kvt::kvtctl {

CommandGroup PeersCommandGroup();

// The records as a table: id, role, peer address, data plane, container version, age.
std::string FormatPeers(const std::vector<v1::DaemonRecord>& daemons, int64_t now_unix_ms);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_PEERS_COMMAND_H_
