// Status propagation macros. Debian's Abseil (20220623) predates ABSL_RETURN_IF_ERROR, so kvt keeps its own.
// Usage:
//   KVT_RETURN_IF_ERROR(DoThing());
//   KVT_ASSIGN_OR_RETURN(auto value, MakeValue());
#ifndef KVT_COMMON_STATUS_MACROS_H_
#define KVT_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVT_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::absl::Status kvt_status_ = (expr);           \
    if (!kvt_status_.ok()) return kvt_status_;     \
  } while (0)

#define KVT_STATUS_CONCAT_INNER_(a, b) a##b
#define KVT_STATUS_CONCAT_(a, b) KVT_STATUS_CONCAT_INNER_(a, b)

#define KVT_ASSIGN_OR_RETURN(lhs, expr) \
  KVT_ASSIGN_OR_RETURN_IMPL_(KVT_STATUS_CONCAT_(kvt_statusor_, __LINE__), lhs, expr)

#define KVT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // KVT_COMMON_STATUS_MACROS_H_
