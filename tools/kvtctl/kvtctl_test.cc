#include "tools/kvtctl/kvtctl.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

struct CliResult {
  int code;
  std::string out, err;
};

CliResult Kvtctl(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = RunKvtctl(args, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

TEST(KvtctlTest, HelpListsEveryCommandGroup) {
  const CliResult r = Kvtctl({"help"});
  EXPECT_EQ(r.code, kExitOk);
  for (const CommandGroup& g : CommandGroups()) EXPECT_NE(r.out.find(g.name), std::string::npos) << g.name;
  EXPECT_NE(r.out.find("codec"), std::string::npos);
  EXPECT_NE(r.out.find("demo"), std::string::npos);
  for (const char* daemon_command : {"stats", "watch", "timeline"}) {
    EXPECT_NE(r.out.find(absl::StrCat("  ", daemon_command, " ")), std::string::npos) << daemon_command;
  }
}

TEST(KvtctlTest, NoCommandIsAUsageError) {
  const CliResult r = Kvtctl({});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("Usage"), std::string::npos);
}

TEST(KvtctlTest, UnknownCommandIsAUsageErrorThatListsTheCommands) {
  const CliResult r = Kvtctl({"frobnicate"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_NE(r.err.find("codec"), std::string::npos);
}

TEST(KvtctlTest, HelpForACommandShowsItsUsage) {
  const CliResult r = Kvtctl({"help", "codec"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("roundtrip"), std::string::npos);
}

}  // namespace
}  // namespace kvt::kvtctl
