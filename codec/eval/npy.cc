// .npy reading and writing; see npy.h. The header is a Python dict literal, parsed strictly here.
#include "codec/eval/npy.h"

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvt::codec::eval {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed .npy file: ", what));
}

// A cursor over the header dict literal, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }".
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }
  absl::StatusOr<std::string> String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Malformed("header: expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Malformed("header: unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  absl::StatusOr<bool> Bool() {
    SkipSpace();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return Malformed("header: fortran_order must be True or False");
  }
  absl::StatusOr<std::vector<int64_t>> Shape() {
    if (!Consume('(')) return Malformed("header: shape must be a tuple");
    std::vector<int64_t> shape;
    while (!Consume(')')) {
      SkipSpace();
      int64_t dim = 0;
      size_t digits = 0;
      while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (dim > (int64_t{1} << 40)) return Malformed("header: shape dimension too large");
        dim = dim * 10 + (text_[pos_] - '0');
        ++pos_;
        ++digits;
      }
      if (digits == 0) return Malformed("header: shape entries must be non-negative integers");
      shape.push_back(dim);
      if (!Consume(',')) {
        if (!Consume(')')) return Malformed("header: expected ',' or ')' in shape");
        break;
      }
    }
    return shape;
  }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
};

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

absl::StatusOr<Header> ParseHeaderDict(absl::string_view text) {
  HeaderParser p(text);
  Header h;
  bool have_descr = false, have_order = false, have_shape = false;
  if (!p.Consume('{')) return Malformed("header is not a dict literal");
  while (!p.Consume('}')) {
    auto key = p.String();
    if (!key.ok()) return key.status();
    if (!p.Consume(':')) return Malformed(absl::StrCat("header: expected ':' after '", *key, "'"));
    if (*key == "descr") {
      auto v = p.String();
      if (!v.ok()) return v.status();
      h.descr = *v;
      have_descr = true;
    } else if (*key == "fortran_order") {
      auto v = p.Bool();
      if (!v.ok()) return v.status();
      h.fortran_order = *v;
      have_order = true;
    } else if (*key == "shape") {
      auto v = p.Shape();
      if (!v.ok()) return v.status();
      h.shape = *std::move(v);
      have_shape = true;
    } else {
      return Malformed(absl::StrCat("header: unexpected key '", *key, "'"));
    }
    if (!p.Consume(',')) {
      if (!p.Consume('}')) return Malformed("header: expected ',' or '}'");
      break;
    }
  }
  if (!p.AtEnd()) return Malformed("header: trailing characters after the dict");
  if (!have_descr || !have_order || !have_shape) {
    return Malformed("header must have the keys 'descr', 'fortran_order' and 'shape'");
  }
  return h;
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

int64_t NpyArray::num_values() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsFloat(sign);  // +-0
  // Subnormal: value = mant * 2^-24.
  const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    return sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to beyond 65504: inf
  if (abs < 0x38800000u) {                          // below the smallest normal half (2^-14): subnormal or 0
    // Round abs * 2^24 to the nearest integer, ties to even, using float arithmetic (exact here).
    const float scaled = BitsFloat(abs) * 16777216.0f;
    float r = static_cast<float>(static_cast<int32_t>(scaled));
    const float frac = scaled - r;
    if (frac > 0.5f || (frac == 0.5f && (static_cast<int32_t>(r) & 1))) r += 1.0f;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent, round the mantissa from 23 to 10 bits to nearest even.
  uint32_t rebased = abs - (112u << 23);
  const uint32_t lsb = (rebased >> 13) & 1u;
  rebased += 0xFFFu + lsb;
  return sign | static_cast<uint16_t>(rebased >> 13);
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes) {
  if (bytes.size() < kMagicBytes + 2 || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0) {
    return Malformed("bad magic (not a .npy file: it must start with \\x93NUMPY)");
  }
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  const uint8_t minor = static_cast<uint8_t>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return Malformed(absl::StrCat("unsupported format version ", major, ".", minor, " (1.0, 2.0, 3.0 are)"));
  }
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) return Malformed("truncated header length");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  }
  const size_t data_offset = 8 + len_bytes + header_len;
  if (bytes.size() < data_offset) return Malformed("truncated header");
  auto header = ParseHeaderDict(bytes.substr(8 + len_bytes, header_len));
  if (!header.ok()) return header.status();

  NpyArray array;
  size_t elem_bytes = 0;
  if (header->descr == "<f4") {
    array.source_dtype = NpyDtype::kFloat32;
    elem_bytes = 4;
  } else if (header->descr == "<f2") {
    array.source_dtype = NpyDtype::kFloat16;
    elem_bytes = 2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported .npy dtype '", header->descr,
        "': kvt reads little-endian float32 ('<f4') or float16 ('<f2'); convert with "
        "numpy: np.save(path, x.astype(np.float32))"));
  }
  if (header->fortran_order) {
    return absl::InvalidArgumentError(
        "unsupported .npy layout: Fortran order; save a C-order array (np.ascontiguousarray(x))");
  }
  if (header->shape.empty()) return absl::InvalidArgumentError("unsupported .npy shape: a scalar (rank 0)");
  int64_t n = 1;
  for (int64_t d : header->shape) {
    n *= d;
    if (n > kMaxNpyValues) {
      return absl::InvalidArgumentError(absl::StrCat(".npy array too large (more than ", kMaxNpyValues, " values)"));
    }
  }
  const size_t data_bytes = static_cast<size_t>(n) * elem_bytes;
  if (bytes.size() - data_offset < data_bytes) {
    return Malformed(absl::StrCat("truncated data: the header promises ", data_bytes, " bytes, the file holds ",
                                  bytes.size() - data_offset));
  }
  if (bytes.size() - data_offset > data_bytes) {
    return Malformed(absl::StrCat(bytes.size() - data_offset - data_bytes, " bytes after the array data"));
  }
  array.shape = header->shape;
  array.data.resize(static_cast<size_t>(n));
  const char* src = bytes.data() + data_offset;
  if (elem_bytes == 4) {
    for (size_t i = 0; i < array.data.size(); ++i) {
      uint32_t u = 0;
      for (int b = 0; b < 4; ++b) u |= static_cast<uint32_t>(static_cast<uint8_t>(src[4 * i + b])) << (8 * b);
      array.data[i] = BitsFloat(u);
    }
  } else {
    for (size_t i = 0; i < array.data.size(); ++i) {
      const uint16_t h = static_cast<uint16_t>(static_cast<uint8_t>(src[2 * i]) |
                                               (static_cast<uint8_t>(src[2 * i + 1]) << 8));
      array.data[i] = HalfToFloat(h);
    }
  }
  return array;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream buf;
  buf << in.rdbuf();
  auto array = ParseNpy(buf.str());
  if (!array.ok()) {
    return absl::Status(array.status().code(), absl::StrCat(path, ": ", array.status().message()));
  }
  return array;
}

absl::StatusOr<std::string> SerializeNpy(const NpyArray& array, NpyDtype dtype) {
  if (dtype != NpyDtype::kFloat32 && dtype != NpyDtype::kFloat16) {
    return absl::InvalidArgumentError(".npy files are written as float32 or float16");
  }
  if (array.shape.empty()) return absl::InvalidArgumentError("cannot write a rank-0 .npy array");
  for (int64_t d : array.shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension in .npy shape");
  }
  if (array.num_values() != static_cast<int64_t>(array.data.size())) {
    return absl::InvalidArgumentError(absl::StrCat("array holds ", array.data.size(), " values but its shape has ",
                                                   array.num_values()));
  }
  std::string shape = absl::StrJoin(array.shape, ", ");
  if (array.shape.size() == 1) shape += ",";
  std::string dict = absl::StrCat("{'descr': '", dtype == NpyDtype::kFloat32 ? "<f4" : "<f2",
                                  "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad with spaces so that the data starts on a 64-byte boundary; the header ends with '\n'.
  const size_t unpadded = kMagicBytes + 2 + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  if (dict.size() > 0xFFFF) return absl::InvalidArgumentError(".npy header too long (rank too high)");
  std::string out(kMagic, kMagicBytes);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xFF));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out += dict;
  const size_t elem_bytes = dtype == NpyDtype::kFloat32 ? 4 : 2;
  const size_t start = out.size();
  out.resize(start + array.data.size() * elem_bytes);
  char* dst = out.data() + start;
  for (size_t i = 0; i < array.data.size(); ++i) {
    if (dtype == NpyDtype::kFloat32) {
      const uint32_t u = FloatBits(array.data[i]);
      for (int b = 0; b < 4; ++b) dst[4 * i + b] = static_cast<char>((u >> (8 * b)) & 0xFF);
    } else {
      const uint16_t h = FloatToHalf(array.data[i]);
      dst[2 * i] = static_cast<char>(h & 0xFF);
      dst[2 * i + 1] = static_cast<char>(h >> 8);
    }
  }
  return out;
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array, NpyDtype dtype) {
  auto bytes = SerializeNpy(array, dtype);
  if (!bytes.ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot open '", path, "' for writing"));
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("failed writing '", path, "'"));
  return absl::OkStatus();
}

}  // namespace kvt::codec::eval
