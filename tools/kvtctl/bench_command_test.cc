#include "tools/kvtctl/bench_command.h"

#include <sstream>

#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

struct CliResult {
  int code;
  std::string out, err;
};

CliResult Bench(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = BenchCommandGroup().run(args, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

TEST(BenchCommandTest, FlagsMapToTransportBenchOptions) {
  auto o = TransportBenchOptionsFromFlags("tcp", "2.5,10", 256, 64, 0.5, 4, 16);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->transports, std::vector<std::string>{"tcp"});
  EXPECT_EQ(o->rates_gbps, (std::vector<double>{2.5, 10}));
  EXPECT_EQ(o->chunk_bytes, 256u << 10);
  EXPECT_EQ(o->unthrottled_bytes, uint64_t{64} << 20);
  EXPECT_EQ(o->anchor_bytes, uint64_t{4} << 20);
  EXPECT_EQ(o->residual_bytes, uint64_t{16} << 20);
  EXPECT_DOUBLE_EQ(o->throttled_seconds, 0.5);
}

TEST(BenchCommandTest, UcxWorkerCountsParseAndOutOfRangeOnesAreInvalid) {
  auto w = UcxWorkerCountsFromFlag("1,4,16");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, (std::vector<int>{1, 4, 16}));
  for (const char* bad : {"", ",", "0", "17", "-2", "two", "1,x"}) {
    EXPECT_EQ(UcxWorkerCountsFromFlag(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  CliResult r = Bench({"transport", "--ucx-workers", "0"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--ucx-workers"), std::string::npos) << r.err;
}

TEST(BenchCommandTest, BadRatesSizesAndEmptyTransportListsAreInvalid) {
  EXPECT_EQ(TransportBenchOptionsFromFlags("tcp", "1,fast", 1024, 1, 1, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TransportBenchOptionsFromFlags("tcp", "-1", 1024, 1, 1, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TransportBenchOptionsFromFlags("tcp", "1", 0, 1, 1, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TransportBenchOptionsFromFlags(",", "1", 1024, 1, 1, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TransportBenchOptionsFromFlags("tcp", "1", 1024, 1, 0, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BenchCommandTest, UsageErrorsExitTwoAndNameTheProblem) {
  CliResult r = Bench({});
  EXPECT_EQ(r.code, kExitUsage);
  r = Bench({"disk"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("unknown subcommand 'disk'"), std::string::npos) << r.err;
  r = Bench({"transport", "--rates-gbps=x"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("bad --rates-gbps entry 'x'"), std::string::npos) << r.err;
  r = Bench({"transport", "--bogus"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
}

TEST(BenchCommandTest, HelpListsTheFlagsAndExitsZero) {
  CliResult r = Bench({"transport", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("--rates-gbps"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvt::kvtctl
