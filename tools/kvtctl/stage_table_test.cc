// FormatStageTable / StagesToJson on a hand-built profile.
#include "tools/kvtctl/stage_table.h"

#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

v1::ProfileResponse Sample() {
  v1::ProfileResponse p;
  v1::StageTime* a = p.add_stages();
  a->set_stage("arrive_anchor");
  a->set_count(10);
  a->set_first_start_us(1000);
  a->set_last_end_us(3000);
  a->set_bytes(4000000);
  v1::StageTime* d = p.add_stages();
  d->set_stage("decode_anchor");
  d->set_count(2);
  d->set_busy_us(1500);
  d->set_first_start_us(2000);
  d->set_last_end_us(2000);  // an empty span: no rate
  return p;
}

TEST(StageTable, JsonHasEveryStageWithItsRateOverItsSpan) {
  const nlohmann::json j = StagesToJson(Sample());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j["arrive_anchor"]["runs"].get<int>(), 10);
  EXPECT_DOUBLE_EQ(j["arrive_anchor"]["first_ms"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["arrive_anchor"]["mb_per_s"].get<double>(), 2000.0);  // 4 MB over 2 ms
  EXPECT_DOUBLE_EQ(j["decode_anchor"]["busy_ms"].get<double>(), 1.5);
  EXPECT_TRUE(j["decode_anchor"]["mb_per_s"].is_null());
}

TEST(StageTable, TableShowsNoBusyTimeForArrivalsAndNoRateWithoutBytes) {
  const std::string t = FormatStageTable(Sample());
  const size_t arrive = t.find("arrive_anchor");
  const size_t decode = t.find("decode_anchor");
  ASSERT_NE(arrive, std::string::npos);
  ASSERT_NE(decode, std::string::npos);
  const std::string arrive_line = t.substr(arrive, t.find('\n', arrive) - arrive);
  const std::string decode_line = t.substr(decode, t.find('\n', decode) - decode);
  EXPECT_NE(arrive_line.find("2000.0"), std::string::npos) << arrive_line;
  EXPECT_NE(decode_line.find("1.5"), std::string::npos) << decode_line;
  EXPECT_EQ(decode_line.back(), '-') << decode_line;
}

}  // namespace
}  // namespace kvt::kvtctl
