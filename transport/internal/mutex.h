// The data plane's names for kvt's TSan-visible mutex (common/mutex.h).
#ifndef KVT_TRANSPORT_INTERNAL_MUTEX_H_
#define KVT_TRANSPORT_INTERNAL_MUTEX_H_

#include "common/mutex.h"

namespace kvt::transport::internal {

using ::kvt::Mutex;
using ::kvt::MutexLock;
using ::kvt::Notification;

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_MUTEX_H_
