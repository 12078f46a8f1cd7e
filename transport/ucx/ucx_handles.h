// RAII owners for UCX handles. Each is a std::unique_ptr with the UCX release function as its deleter.
// A handle must be released on the thread that uses it (the progress thread for workers).
#ifndef KVT_TRANSPORT_UCX_UCX_HANDLES_H_
#define KVT_TRANSPORT_UCX_UCX_HANDLES_H_

#include <memory>

#include "ucp/api/ucp.h"

namespace kvt::transport::internal {

struct UcpConfigDeleter {
  void operator()(ucp_config_t* c) const { ucp_config_release(c); }
};
struct UcpContextDeleter {
  void operator()(ucp_context* c) const { ucp_cleanup(c); }
};
struct UcpWorkerDeleter {
  void operator()(ucp_worker* w) const { ucp_worker_destroy(w); }
};

using UcpConfig = std::unique_ptr<ucp_config_t, UcpConfigDeleter>;
using UcpContext = std::unique_ptr<ucp_context, UcpContextDeleter>;
using UcpWorker = std::unique_ptr<ucp_worker, UcpWorkerDeleter>;

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_UCX_UCX_HANDLES_H_
