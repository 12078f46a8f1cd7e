#include "transport/internal/control_message.h"

#include "gtest/gtest.h"

namespace kvt::transport::internal {
namespace {

TEST(ControlMessageTest, EveryTypeRoundTrips) {
  for (ControlType t : {ControlType::kHello, ControlType::kCredit, ControlType::kPing, ControlType::kAbort,
                        ControlType::kAck, ControlType::kGoodbye}) {
    const ControlMessage m{t, 0x1122334455667788ull, 42};
    auto bytes = EncodeControlMessage(m);
    auto back = DecodeControlMessage(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->type, t);
    EXPECT_EQ(back->a, m.a);
    EXPECT_EQ(back->b, m.b);
  }
}

TEST(ControlMessageTest, UnknownTypeBadMagicAndWrongSizeAreInvalidArgument) {
  auto bytes = EncodeControlMessage({ControlType::kPing, 0, 0});
  auto bad_type = bytes;
  bad_type[5] = 9;
  EXPECT_EQ(DecodeControlMessage(bad_type).status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_magic = bytes;
  bad_magic[0] ^= 1;
  EXPECT_EQ(DecodeControlMessage(bad_magic).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeControlMessage(absl::MakeConstSpan(bytes.data(), 23)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::transport::internal
