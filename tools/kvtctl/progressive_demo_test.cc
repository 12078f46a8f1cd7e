// DemoReport's arithmetic on hand-made reports: a run's link time, and when the lynx-vs-int8 verdict is withheld.
// (tests/e2e/demo_test runs the demo itself.)
#include "tools/kvtctl/progressive_demo.h"

#include "gtest/gtest.h"
#include "transport/options.h"

namespace kvt::kvtctl {
namespace {

SchemeRun MakeRun(const std::string& scheme, uint64_t wire_bytes, double full_ms, std::optional<double> steal,
                  double rate_gbps = 1.0) {
  SchemeRun r;
  r.scheme = scheme;
  r.rate_gbps = rate_gbps;
  r.wire_bytes = wire_bytes;
  r.full_ms = full_ms;
  r.host_steal = steal;
  return r;
}

// A report of `runs`, all at `rate_gbps` (their own rate is set to it).
DemoReport Report(double rate_gbps, std::vector<SchemeRun> runs) {
  DemoReport r;
  r.options.rates_gbps = {rate_gbps};
  for (SchemeRun& run : runs) run.rate_gbps = rate_gbps;
  r.runs = std::move(runs);
  return r;
}

TEST(DemoReport, IdealMsIsTheWireBytesAtTheLinkRate) {
  EXPECT_DOUBLE_EQ(DemoReport::IdealMs(MakeRun("int8", 125'000'000, 1100, 0.1, 1.0)),
                   1000.0);  // 10^9 bits at 10^9 bit/s
  EXPECT_DOUBLE_EQ(DemoReport::IdealMs(MakeRun("int8", 125'000'000, 1100, 0.1, 10.0)), 100.0);
  EXPECT_EQ(DemoReport::IdealMs(MakeRun("int8", 125'000'000, 1100, 0.1, 0)), 0);  // unlimited
}

TEST(DemoReport, AnInt8RunNearItsLinkTimeIsJudged) {
  const DemoReport r = Report(1.0, {MakeRun("int8", 125'000'000, 1070, 0.3), MakeRun("lynx", 125'000'000, 4000, 0.0)});
  EXPECT_EQ(r.NotLinkBoundBecause(1.0), "");  // a slow lynx is a result to report (MISSED), not a reason to withhold
}

TEST(DemoReport, AnInt8RunFarOverItsLinkTimeWithholdsTheVerdictAndSaysWhy) {
  const DemoReport r = Report(1.0, {MakeRun("int8", 125'000'000, 8900, 0.61)});
  const std::string why = r.NotLinkBoundBecause(1.0);
  EXPECT_NE(why.find("int8's run took 8.9 x"), std::string::npos) << why;
  EXPECT_NE(why.find("1.00 Gbit/s"), std::string::npos) << why;
  EXPECT_NE(why.find("host CPU steal 61%"), std::string::npos) << why;
}

TEST(DemoReport, TheReasonLeavesOutStealWhereItWasNotMeasured) {
  const std::string why = Report(1.0, {MakeRun("int8", 125'000'000, 3000, std::nullopt)}).NotLinkBoundBecause(1.0);
  EXPECT_NE(why.find("3.0 x"), std::string::npos) << why;
  EXPECT_EQ(why.find("steal"), std::string::npos) << why;
}

TEST(DemoReport, TheThresholdIsOneAndAHalfLinkTimes) {
  EXPECT_EQ(Report(1.0, {MakeRun("int8", 125'000'000, 1500, 0)}).NotLinkBoundBecause(1.0), "");
  EXPECT_NE(Report(1.0, {MakeRun("int8", 125'000'000, 1501, 0)}).NotLinkBoundBecause(1.0), "");
}

TEST(DemoReport, NothingIsWithheldOnAnUnlimitedLinkOrWithoutAnInt8Run) {
  EXPECT_EQ(Report(0, {MakeRun("int8", 125'000'000, 9000, 0.9)}).NotLinkBoundBecause(0), "");
  EXPECT_EQ(Report(1.0, {MakeRun("lynx", 125'000'000, 9000, 0.9)}).NotLinkBoundBecause(1.0), "");
}

TEST(DemoReport, EachRateIsJudgedOnItsOwnInt8Run) {
  DemoReport r;
  r.options.rates_gbps = {1.0, 10.0};
  r.runs = {MakeRun("int8", 125'000'000, 1050, 0, 1.0), MakeRun("int8", 125'000'000, 900, 0, 10.0)};
  EXPECT_EQ(r.NotLinkBoundBecause(1.0), "");
  const std::string why = r.NotLinkBoundBecause(10.0);  // 900 ms against 100 ms at 10 Gbit/s
  EXPECT_NE(why.find("9.0 x"), std::string::npos) << why;
  EXPECT_NE(why.find("10.00 Gbit/s"), std::string::npos) << why;
  EXPECT_EQ(r.Find("int8", 10.0)->full_ms, 900);
  EXPECT_EQ(r.Find("int8", 25.0), nullptr);
}

TEST(SchemeRun, GoodputIsTheWireBitsOverTheTimeToFullPrecision) {
  EXPECT_DOUBLE_EQ(MakeRun("int8", 125'000'000, 100, 0).goodput_gbps(), 10.0);
  EXPECT_EQ(MakeRun("int8", 125'000'000, 0, 0).goodput_gbps(), 0);
}

TEST(DemoOptions, TheChunkIsKvtdsDefaultUnlessGiven) {
  DemoOptions o;
  EXPECT_EQ(ChunkBytes(o), transport::Options().chunk_bytes);
  o.chunk_kib = 2048;
  EXPECT_EQ(ChunkBytes(o), 2048u << 10);
}

TEST(DemoOptions, AChunkOutsideItsRangeIsRefusedBeforeAnyDaemonStarts) {
  for (int kib : {-1, 65537, 1 << 22}) {
    DemoOptions o;
    o.kvtd = "/nonexistent/kvtd";  // never reached: the options are checked first
    o.chunk_kib = kib;
    absl::StatusOr<DemoReport> r = RunProgressiveDemo(o, [](absl::string_view, bool) {});
    ASSERT_FALSE(r.ok()) << kib;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << kib;
    EXPECT_NE(r.status().message().find("--chunk-kib"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace kvt::kvtctl
