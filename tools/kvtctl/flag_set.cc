// Per-subcommand flag parsing on CLI11 (Debian's libcli11-dev); see flag_set.h.
#include "tools/kvtctl/flag_set.h"

#include <algorithm>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kvt::kvtctl {
namespace {

// "--out_prefix=x" -> "--out-prefix=x": underscores in a flag's name (never in its value) read as dashes.
std::string NormalizeFlagName(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return arg;
  std::string out = arg;
  const size_t end = std::min(out.find('='), out.size());
  std::replace(out.begin() + 2, out.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
  return out;
}

}  // namespace

void FlagSet::Add(const std::string& name, const std::string& help, std::string default_text, bool is_bool,
                  std::function<bool(absl::string_view)> parse) {
  flags_.push_back({name, help, std::move(default_text), is_bool, std::move(parse)});
}

void FlagSet::String(const std::string& name, std::string* value, const std::string& help) {
  Add(name, help, absl::StrCat("\"", *value, "\""), false, [value](absl::string_view v) {
    *value = std::string(v);
    return true;
  });
}

void FlagSet::Int(const std::string& name, int* value, const std::string& help) {
  Add(name, help, absl::StrCat(*value), false, [value](absl::string_view v) { return absl::SimpleAtoi(v, value); });
}

void FlagSet::Uint64(const std::string& name, uint64_t* value, const std::string& help) {
  Add(name, help, absl::StrCat(*value), false, [value](absl::string_view v) { return absl::SimpleAtoi(v, value); });
}

void FlagSet::Double(const std::string& name, double* value, const std::string& help) {
  Add(name, help, absl::StrCat(*value), false, [value](absl::string_view v) { return absl::SimpleAtod(v, value); });
}

void FlagSet::Bool(const std::string& name, bool* value, const std::string& help) {
  Add(name, help, *value ? "true" : "false", true, [value](absl::string_view v) { return absl::SimpleAtob(v, value); });
}

void FlagSet::Strings(const std::string& name, std::vector<std::string>* value, const std::string& help) {
  Add(name, help, absl::StrCat("[", absl::StrJoin(*value, ","), "]"), false, nullptr);
  flags_.back().set_all = [value](std::vector<std::string> v) { *value = std::move(v); };
}

bool FlagSet::WasSet(const std::string& name) const {
  return std::find(set_.begin(), set_.end(), name) != set_.end();
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  CLI::App app(command_);
  app.set_help_flag();  // --help is reported through help_requested(), not by printing and exiting
  bool help = false;
  app.add_flag("-h,--help", help, "show the flags");
  // CLI11 does the command-line grammar ("--a=b", "--a b", "--" and positionals, "--noflag"); values are
  // captured as text and converted below, so every bad value gets the same message naming its flag.
  std::vector<std::string> raw(flags_.size());
  std::vector<std::vector<std::string>> raw_all(flags_.size());
  std::vector<int> negated(flags_.size(), 0);
  for (size_t i = 0; i < flags_.size(); ++i) {
    const Flag& f = flags_[i];
    if (f.set_all) {
      // One value per occurrence: "--request a b" leaves b a positional argument.
      app.add_option("--" + f.name, raw_all[i], f.help)->allow_extra_args(false);
    } else if (f.is_bool) {
      app.add_flag("--" + f.name + "{true}", raw[i], f.help);
      app.add_flag("--no" + f.name, negated[i], f.help);
    } else {
      app.add_option("--" + f.name, raw[i], f.help);
    }
  }
  std::vector<std::string> positional;
  app.add_option("args", positional, "positional arguments");
  // CLI11 parses a reversed argument vector; names are normalized (underscores as dashes) up to "--".
  std::vector<std::string> reversed;
  reversed.reserve(args.size());
  // "--name=" (an empty value, as a shell passes --name="") becomes "--name" "", which CLI11 accepts.
  auto takes_value = [this](absl::string_view name) {
    return std::any_of(flags_.begin(), flags_.end(),
                       [name](const Flag& f) { return !f.is_bool && f.name == name; });
  };
  bool after_dashes = false;
  for (const std::string& a : args) {
    after_dashes = after_dashes || a == "--";
    const std::string arg = after_dashes ? a : NormalizeFlagName(a);
    if (!after_dashes && arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.back() == '=' &&
        takes_value(absl::string_view(arg).substr(2, arg.size() - 3))) {
      reversed.push_back(arg.substr(0, arg.size() - 1));
      reversed.push_back("");
    } else {
      reversed.push_back(arg);
    }
  }
  std::reverse(reversed.begin(), reversed.end());
  try {
    app.parse(reversed);
  } catch (const CLI::ExtrasError& e) {
    std::string first = e.what();
    for (const std::string& a : args) {
      if (a.size() > 1 && a[0] == '-') {
        const std::string name = NormalizeFlagName(a).substr(0, a.find('='));
        if (app.get_option_no_throw(name) == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat("unknown flag '", name, "' for ", command_));
        }
      }
    }
    return absl::InvalidArgumentError(first);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  help_requested_ = help_requested_ || help;
  positional_.insert(positional_.end(), positional.begin(), positional.end());
  for (size_t i = 0; i < flags_.size(); ++i) {
    const Flag& f = flags_[i];
    const bool given = app.count("--" + f.name) > 0;
    if (given && f.set_all) {
      f.set_all(raw_all[i]);
    } else if (given && !f.parse(raw[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value '", raw[i], "' for flag '--", f.name, "' (", f.help, ")"));
    }
    if (f.is_bool && negated[i] > 0) f.parse("false");
    if (given || (f.is_bool && negated[i] > 0)) set_.push_back(f.name);
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("Flags of ", command_, ":\n");
  for (const Flag& f : flags_) {
    absl::StrAppendFormat(&out, "  --%-16s %s (default %s)\n", f.name, f.help, f.default_text);
  }
  return out;
}

}  // namespace kvt::kvtctl
