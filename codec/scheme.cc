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
    "streams, total 2..8 bits), any lynx form with the suffixes +spike (spike reserving), +e<8..23> (chunk-end "
    "pair bits; default 14) and +f<0..7> (frame spikes per page-channel; default 3, 0 with +spike)";

// A suffix "<letter><digits>" (digits only, 1..2 of them) as its number, or -1.
int SuffixNumber(absl::string_view suffix, char letter) {
  if (suffix.size() < 2 || suffix.size() > 3 || suffix[0] != letter) return -1;
  int value = 0;
  for (char c : suffix.substr(1)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
    value = 10 * value + (c - '0');
  }
  return value;
}

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
  if (end_pair_bits != kDefaultEndPairBits) absl::StrAppend(&name, "+e", end_pair_bits);
  if (frame_spikes != (spike_reserve ? 0 : kDefaultFrameSpikes)) absl::StrAppend(&name, "+f", frame_spikes);
  return name;
}

int ResolveChunkTokens(const Scheme& scheme, int chunk_tokens) {
  if (chunk_tokens != 0) return chunk_tokens;
  return scheme.kind == SchemeKind::kLynx ? kLynxChunkTokens : kUniformChunkTokens;
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
  // Suffixes, in any order, each at most once: +spike, +e<bits>, +f<count>.
  int end_pair_bits = -1, frame_spikes = -1;
  for (size_t plus = s.rfind('+'); plus != absl::string_view::npos; plus = s.rfind('+')) {
    const absl::string_view suffix = s.substr(plus + 1);
    int value = 0;
    if (suffix == "spike" && !scheme.spike_reserve) {
      scheme.spike_reserve = true;
    } else if (end_pair_bits < 0 && (value = SuffixNumber(suffix, 'e')) >= 0) {
      if (value < kMinEndPairBits || value > kMaxEndPairBits) {
        return Invalid(name, absl::StrCat("end pair bits ", value, " outside ", kMinEndPairBits, "..", kMaxEndPairBits));
      }
      end_pair_bits = value;
    } else if (frame_spikes < 0 && (value = SuffixNumber(suffix, 'f')) >= 0) {
      if (value < 0 || value > kMaxFrameSpikes) {
        return Invalid(name, absl::StrCat("frame spikes ", value, " outside 0..", kMaxFrameSpikes));
      }
      frame_spikes = value;
    } else {
      return Invalid(name, absl::StrCat("unknown or repeated suffix '+", suffix, "'"));
    }
    s = s.substr(0, plus);
  }
  scheme.end_pair_bits = end_pair_bits >= 0 ? end_pair_bits : kDefaultEndPairBits;
  scheme.frame_spikes = frame_spikes >= 0 ? frame_spikes : (scheme.spike_reserve ? 0 : kDefaultFrameSpikes);
  if (scheme.spike_reserve && scheme.frame_spikes != 0) {
    return Invalid(name, "+spike keeps one value per chunk exactly and takes no frame spikes (+f0)");
  }
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
