// Per-subcommand flag parsing for kvtctl, on CLI11 (Debian's libcli11-dev). absl flags are process-global and
// exit(1) on a bad flag; kvtctl's subcommands each need their own flags (`--tokens` means one thing to
// `codec eval`, another to `bench`) and usage errors that exit 2 with the command's usage, testable without a
// process. This wrapper keeps CLI11's exceptions inside and answers with a Status. Thread-compatible.
//
//   FlagSet flags("kvtctl codec eval");
//   std::string model = "llama-3.1-8b";
//   flags.String("model", &model, "synthetic model preset");
//   absl::Status st = flags.Parse({"--model=qwen3-32b"});   // INVALID_ARGUMENT for unknown flags, bad values
#ifndef KVT_TOOLS_KVTCTL_FLAG_SET_H_
#define KVT_TOOLS_KVTCTL_FLAG_SET_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"


namespace kvt::kvtctl {

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  // Each binds a flag `--name` to `*value`, whose current value is the default shown in Usage(). Names use
  // dashes; underscores on the command line are accepted as dashes. `*value` must outlive Parse().
  void String(const std::string& name, std::string* value, const std::string& help);
  void Int(const std::string& name, int* value, const std::string& help);
  void Uint64(const std::string& name, uint64_t* value, const std::string& help);
  void Double(const std::string& name, double* value, const std::string& help);
  // A boolean: `--name`, `--name=true|false`, `--noname`.
  void Bool(const std::string& name, bool* value, const std::string& help);
  // A repeatable flag, one value per occurrence (`--name a --name b`): when given, `*value` becomes the values
  // in command-line order (replacing its default).
  void Strings(const std::string& name, std::vector<std::string>* value, const std::string& help);

  // Parses `args` ("--name=value", "--name value", "--name=" for an empty value, booleans as above; "--" ends
  // flags). Arguments that are not flags are collected in positional(). INVALID_ARGUMENT naming the flag for an
  // unknown flag, a missing or malformed value. `--help` / `-h` set help_requested() instead of failing. May be
  // called more than once; each call sees the values the previous calls left.
  absl::Status Parse(const std::vector<std::string>& args);

  const std::vector<std::string>& positional() const { return positional_; }
  bool help_requested() const { return help_requested_; }
  // Whether `--name` appeared on the command line (as opposed to keeping its default).
  bool WasSet(const std::string& name) const;
  // "Flags of <command>:" and one line per flag with its default and help.
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<bool(absl::string_view)> parse;  // stores the value; false: malformed
    std::function<void(std::vector<std::string>)> set_all;  // set: a repeatable flag, given its values
  };
  void Add(const std::string& name, const std::string& help, std::string default_text, bool is_bool,
           std::function<bool(absl::string_view)> parse);

  std::string command_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  std::vector<std::string> set_;  // names given on some command line so far
  bool help_requested_ = false;
};

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_FLAG_SET_H_
