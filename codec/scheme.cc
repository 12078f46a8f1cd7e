#include "codec/scheme.h"

#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvt::codec {
namespace {

constexpr char kValidForms[] =
    "valid schemes: bf16, int8, int4, fp8, lynx, lynx8, lynx4, lynx-a{a}r{r}[r{r}...] (widths >= 1, at most 8 "
    "streams, total 2..8 bits), any lynx form with the suffix +spike";

absl::Status Invalid(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("unknown codec scheme '", name, "': ", why, "; ", kValidForms));
}

}  // namespace

int Scheme::total_code_bits() const { return std::accumulate(stage_bits.begin(), stage_bits.end(), 0); }

std::string Scheme::Name() const {
  switch (kind) {
    case SchemeKind::kBf16:
      return "bf16";
    case SchemeKind::kInt8:
      return "int8";
    case SchemeKind::kInt4:
      return "int4";
    case SchemeKind::kFp8:
      return "fp8";
    case SchemeKind::kLynx:
      break;
  }
  std::string name;
  if (stage_bits == std::vector<int>{4, 4}) {
    name = "lynx";
  } else if (stage_bits == std::vector<int>{8}) {
    name = "lynx8";
  } else if (stage_bits == std::vector<int>{4}) {
    name = "lynx4";
  } else {
    name = "lynx-";
    for (size_t i = 0; i < stage_bits.size(); ++i) absl::StrAppend(&name, i == 0 ? "a" : "r", stage_bits[i]);
  }
  if (spike_reserve) name += "+spike";
  return name;
}

absl::StatusOr<Scheme> ParseScheme(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  absl::string_view s = lower;
  Scheme scheme;
  if (s == "bf16") return Scheme{SchemeKind::kBf16, {16}, false};
  if (s == "int8") return Scheme{SchemeKind::kInt8, {8}, false};
  if (s == "int4") return Scheme{SchemeKind::kInt4, {4}, false};
  if (s == "fp8") return Scheme{SchemeKind::kFp8, {8}, false};
  scheme.kind = SchemeKind::kLynx;
  if (absl::ConsumeSuffix(&s, "+spike")) scheme.spike_reserve = true;
  if (s == "lynx") {
    scheme.stage_bits = {4, 4};
  } else if (s == "lynx8") {
    scheme.stage_bits = {8};
  } else if (s == "lynx4") {
    scheme.stage_bits = {4};
  } else if (absl::ConsumePrefix(&s, "lynx-a")) {
    // Widths separated by 'r': "2r2r4".
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t next = s.find('r', pos);
      absl::string_view part = s.substr(pos, next == absl::string_view::npos ? absl::string_view::npos : next - pos);
      int bits = 0;
      if (part.empty() || part.size() > 1 || !absl::SimpleAtoi(part, &bits) || bits < 1) {
        return Invalid(name, "each stage width must be one digit 1..8");
      }
      scheme.stage_bits.push_back(bits);
      if (next == absl::string_view::npos) break;
      pos = next + 1;
    }
    if (scheme.stage_bits.size() < 2) return Invalid(name, "lynx-a{a} needs at least one r{r} stage");
  } else {
    return Invalid(name, "not a known form");
  }
  if (scheme.num_streams() > kMaxStreams) return Invalid(name, "more than 8 streams");
  int total = scheme.total_code_bits();
  if (total < 2 || total > 8) return Invalid(name, absl::StrCat("total code bits ", total, " outside 2..8"));
  return scheme;
}

std::vector<std::string> StandardSchemeNames() {
  return {"bf16", "int8", "int4", "fp8", "lynx", "lynx-a2r6", "lynx-a3r5", "lynx-a2r2r4", "lynx8", "lynx4"};
}

}  // namespace kvt::codec
