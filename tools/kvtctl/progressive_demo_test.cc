// DemoReport's arithmetic on hand-made reports: a run's link time, and when the lynx-vs-int8 verdict is withheld.
// (tests/e2e/demo_test runs the demo itself.)
#include "tools/kvtctl/progressive_demo.h"

#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

SchemeRun MakeRun(const std::string& scheme, uint64_t wire_bytes, double full_ms, std::optional<double> steal) {
  SchemeRun r;
  r.scheme = scheme;
  r.wire_bytes = wire_bytes;
  r.full_ms = full_ms;
  r.host_steal = steal;
  return r;
}

DemoReport Report(double rate_gbps, std::vector<SchemeRun> runs) {
  DemoReport r;
  r.options.rate_gbps = rate_gbps;
  r.runs = std::move(runs);
  return r;
}

TEST(DemoReport, IdealMsIsTheWireBytesAtTheLinkRate) {
  const DemoReport r = Report(1.0, {MakeRun("int8", 125'000'000, 1100, 0.1)});
  EXPECT_DOUBLE_EQ(r.IdealMs(r.runs[0]), 1000.0);  // 10^9 bits at 10^9 bit/s
  EXPECT_EQ(Report(0, {}).IdealMs(r.runs[0]), 0);     // unlimited
}

TEST(DemoReport, AnInt8RunNearItsLinkTimeIsJudged) {
  const DemoReport r = Report(1.0, {MakeRun("int8", 125'000'000, 1070, 0.3), MakeRun("lynx", 125'000'000, 4000, 0.0)});
  EXPECT_EQ(r.NotLinkBoundBecause(), "");  // a slow lynx is a result to report (MISSED), not a reason to withhold
}

TEST(DemoReport, AnInt8RunFarOverItsLinkTimeWithholdsTheVerdictAndSaysWhy) {
  const DemoReport r = Report(1.0, {MakeRun("int8", 125'000'000, 8900, 0.61)});
  const std::string why = r.NotLinkBoundBecause();
  EXPECT_NE(why.find("int8's run took 8.9 x"), std::string::npos) << why;
  EXPECT_NE(why.find("1.00 Gbit/s"), std::string::npos) << why;
  EXPECT_NE(why.find("host CPU steal 61%"), std::string::npos) << why;
}

TEST(DemoReport, TheReasonLeavesOutStealWhereItWasNotMeasured) {
  const std::string why = Report(1.0, {MakeRun("int8", 125'000'000, 3000, std::nullopt)}).NotLinkBoundBecause();
  EXPECT_NE(why.find("3.0 x"), std::string::npos) << why;
  EXPECT_EQ(why.find("steal"), std::string::npos) << why;
}

TEST(DemoReport, TheThresholdIsOneAndAHalfLinkTimes) {
  EXPECT_EQ(Report(1.0, {MakeRun("int8", 125'000'000, 1500, 0)}).NotLinkBoundBecause(), "");
  EXPECT_NE(Report(1.0, {MakeRun("int8", 125'000'000, 1501, 0)}).NotLinkBoundBecause(), "");
}

TEST(DemoReport, NothingIsWithheldOnAnUnlimitedLinkOrWithoutAnInt8Run) {
  EXPECT_EQ(Report(0, {MakeRun("int8", 125'000'000, 9000, 0.9)}).NotLinkBoundBecause(), "");
  EXPECT_EQ(Report(1.0, {MakeRun("lynx", 125'000'000, 9000, 0.9)}).NotLinkBoundBecause(), "");
}

}  // namespace
}  // namespace kvt::kvtctl
