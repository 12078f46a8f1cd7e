// Per-subcommand flag parsing; see flag_set.h.
#include "tools/kvtctl/flag_set.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvt::kvtctl {
namespace {

std::string Normalize(absl::string_view name) {
  std::string s(name);
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

}  // namespace

void FlagSet::String(const std::string& name, std::string* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat("\"", *value, "\""), false, false, [value](absl::string_view v) {
                      *value = std::string(v);
                      return true;
                    }});
}

void FlagSet::Int(const std::string& name, int* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), false, false,
                    [value](absl::string_view v) { return absl::SimpleAtoi(v, value); }});
}

void FlagSet::Uint64(const std::string& name, uint64_t* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), false, false,
                    [value](absl::string_view v) { return absl::SimpleAtoi(v, value); }});
}

void FlagSet::Double(const std::string& name, double* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), false, false,
                    [value](absl::string_view v) { return absl::SimpleAtod(v, value); }});
}

void FlagSet::Bool(const std::string& name, bool* value, const std::string& help) {
  flags_.push_back({name, help, *value ? "true" : "false", true, false,
                    [value](absl::string_view v) { return absl::SimpleAtob(v, value); }});
}

FlagSet::Flag* FlagSet::Find(absl::string_view name) {
  const std::string n = Normalize(name);
  for (Flag& f : flags_) {
    if (f.name == n) return &f;
  }
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      help_requested_ = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    absl::string_view body(arg);
    body.remove_prefix(body.substr(0, 2) == "--" ? 2 : 1);
    const size_t eq = body.find('=');
    absl::string_view name = body.substr(0, eq);
    Flag* flag = Find(name);
    if (flag == nullptr && eq == absl::string_view::npos && name.substr(0, 2) == "no") {
      Flag* negated = Find(name.substr(2));
      if (negated != nullptr && negated->is_bool) {
        negated->parse("false");
        negated->set = true;
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", name, "' for ", command_));
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(body.substr(eq + 1));
    } else if (flag->is_bool) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag '--", flag->name, "' needs a value"));
    }
    if (!flag->parse(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value '", value, "' for flag '--", flag->name, "' (", flag->help, ")"));
    }
    flag->set = true;
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
