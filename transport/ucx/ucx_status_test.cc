#include "transport/ucx/ucx_status.h"

#include "gtest/gtest.h"

namespace kvt::transport::internal {
namespace {

TEST(UcxStatusTest, SuccessAndInProgressAreOk) {
  EXPECT_TRUE(UcsToStatus(UCS_OK, "x").ok());
  EXPECT_TRUE(UcsToStatus(UCS_INPROGRESS, "x").ok());
}

TEST(UcxStatusTest, LostPeersAreUnavailableAndTimeoutsDeadlineExceeded) {
  EXPECT_EQ(UcsToStatus(UCS_ERR_CONNECTION_RESET, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(UcsToStatus(UCS_ERR_ENDPOINT_TIMEOUT, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(UcsToStatus(UCS_ERR_UNREACHABLE, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(UcsToStatus(UCS_ERR_TIMED_OUT, "x").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(UcsToStatus(UCS_ERR_CANCELED, "x").code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(UcsToStatus(UCS_ERR_NO_MEMORY, "x").code(), absl::StatusCode::kResourceExhausted);
}

TEST(UcxStatusTest, MessageNamesTheOperationAndUcxText) {
  const absl::Status s = UcsToStatus(UCS_ERR_INVALID_PARAM, "ucp_ep_create");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ucp_ep_create"), absl::string_view::npos);
  EXPECT_NE(s.message().find(ucs_status_string(UCS_ERR_INVALID_PARAM)), absl::string_view::npos);
}

}  // namespace
}  // namespace kvt::transport::internal
