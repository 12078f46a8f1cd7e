// .safetensors reading; see safetensors.h. Layout: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}), then the
// data, with offsets relative to its start.
#include "codec/eval/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace kvt::codec::eval {
namespace {

using nlohmann::json;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed .safetensors file: ", what));
}

struct Header {
  json doc;               // the parsed header object
  absl::string_view data;  // the bytes after the header
};

absl::StatusOr<Header> ParseHeader(absl::string_view bytes) {
  if (bytes.size() < 8) return Malformed("shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (n > kMaxSafetensorsHeaderBytes) return Malformed(absl::StrCat("header length ", n, " is over 100 MB"));
  if (n > bytes.size() - 8) return Malformed(absl::StrCat("header length ", n, " runs past the end of the file"));
  Header h;
  h.doc = json::parse(bytes.substr(8, n).begin(), bytes.substr(8, n).end(), nullptr, /*allow_exceptions=*/false);
  if (h.doc.is_discarded()) return Malformed("the header is not valid JSON");
  if (!h.doc.is_object()) return Malformed("the header is not a JSON object");
  h.data = bytes.substr(8 + n);
  return h;
}

std::vector<std::string> Names(const json& doc) {
  std::vector<std::string> names;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool NonNegativeInteger(const json& j) { return j.is_number_unsigned() || (j.is_number_integer() && j >= 0); }

}  // namespace

absl::StatusOr<std::vector<std::string>> SafetensorsTensorNames(absl::string_view bytes) {
  auto h = ParseHeader(bytes);
  if (!h.ok()) return h.status();
  return Names(h->doc);
}

absl::StatusOr<NpyArray> ParseSafetensors(absl::string_view bytes, const std::string& name) {
  auto h = ParseHeader(bytes);
  if (!h.ok()) return h.status();
  const std::vector<std::string> names = Names(h->doc);
  std::string key = name;
  if (key.empty()) {
    if (names.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("the file holds ", names.size(),
                                                     " tensors; name one with --tensor: ", absl::StrJoin(names, ", ")));
    }
    key = names[0];
  }
  if (key == "__metadata__" || !h->doc.contains(key)) {
    return absl::NotFoundError(absl::StrCat("no tensor '", key, "' in the file; it holds: ", absl::StrJoin(names, ", ")));
  }
  const json& t = h->doc[key];
  if (!t.is_object()) return Malformed(absl::StrCat("entry '", key, "' is not an object"));
  if (!t.contains("dtype") || !t["dtype"].is_string()) return Malformed(absl::StrCat("'", key, "' has no dtype"));
  if (!t.contains("shape") || !t["shape"].is_array()) return Malformed(absl::StrCat("'", key, "' has no shape"));
  if (!t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2 ||
      !NonNegativeInteger(t["data_offsets"][0]) || !NonNegativeInteger(t["data_offsets"][1])) {
    return Malformed(absl::StrCat("'", key, "' needs data_offsets [begin, end]"));
  }
  const std::string dtype = t["dtype"].get<std::string>();
  NpyArray array;
  size_t elem = 0;
  if (dtype == "F32") {
    array.source_dtype = NpyDtype::kFloat32;
    elem = 4;
  } else if (dtype == "F16") {
    array.source_dtype = NpyDtype::kFloat16;
    elem = 2;
  } else if (dtype == "BF16") {
    array.source_dtype = NpyDtype::kBfloat16;
    elem = 2;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported .safetensors dtype '", dtype, "' of '", key, "': kvt reads F32, F16 and BF16"));
  }
  int64_t n = 1;
  for (const json& d : t["shape"]) {
    if (!NonNegativeInteger(d)) return Malformed(absl::StrCat("'", key, "' has a shape entry that is not a size"));
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(kMaxNpyValues)) return absl::InvalidArgumentError("tensor too large");
    array.shape.push_back(static_cast<int64_t>(v));
    n *= array.shape.back();
    if (n > kMaxNpyValues) return absl::InvalidArgumentError(absl::StrCat("tensor '", key, "' is too large"));
  }
  if (array.shape.empty()) return absl::InvalidArgumentError(absl::StrCat("tensor '", key, "' is a scalar"));
  const uint64_t begin = t["data_offsets"][0].get<uint64_t>(), end = t["data_offsets"][1].get<uint64_t>();
  if (begin > end || end > h->data.size()) {
    return Malformed(absl::StrCat("'", key, "' data_offsets [", begin, ", ", end, "] fall outside the ",
                                  h->data.size(), " data bytes"));
  }
  if (end - begin != static_cast<uint64_t>(n) * elem) {
    return Malformed(absl::StrCat("'", key, "' has ", end - begin, " data bytes but its shape and dtype need ",
                                  static_cast<uint64_t>(n) * elem));
  }
  const char* src = h->data.data() + begin;
  array.data.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < array.data.size(); ++i) {
    uint32_t u = 0;
    if (elem == 4) {
      for (int b = 0; b < 4; ++b) u |= static_cast<uint32_t>(static_cast<uint8_t>(src[4 * i + b])) << (8 * b);
      std::memcpy(&array.data[i], &u, 4);
    } else {
      const uint16_t v = static_cast<uint16_t>(static_cast<uint8_t>(src[2 * i]) |
                                               (static_cast<uint8_t>(src[2 * i + 1]) << 8));
      if (array.source_dtype == NpyDtype::kFloat16) {
        array.data[i] = HalfToFloat(v);
      } else {
        u = static_cast<uint32_t>(v) << 16;
        std::memcpy(&array.data[i], &u, 4);
      }
    }
  }
  return array;
}

absl::StatusOr<NpyArray> ReadSafetensorsFile(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream buf;
  buf << in.rdbuf();
  auto array = ParseSafetensors(buf.str(), name);
  if (!array.ok()) return absl::Status(array.status().code(), absl::StrCat(path, ": ", array.status().message()));
  return array;
}

}  // namespace kvt::codec::eval
