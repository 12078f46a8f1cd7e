#include "collective/data_type.h"

#include <cstring>

#include "numerics/float16.h"

namespace kvt::collective {

namespace ff = ::kvt::numerics;


float RoundTo(DataType type, float x) {
  switch (type) {
    case DataType::kBfloat16:
      return ff::Bf16ToFloat(ff::FloatToBf16(x));
    case DataType::kFloat16:
      return ff::F16ToFloat(ff::FloatToF16(x, ff::F16Round::kNearestEven));
    case DataType::kFloat32:
      break;
  }
  return x;
}

std::vector<uint8_t> EncodeAs(DataType type, absl::Span<const float> x) {
  std::vector<uint8_t> bytes(x.size() * numerics::DTypeBytes(type));
  if (type == DataType::kFloat32) {
    if (!x.empty()) std::memcpy(bytes.data(), x.data(), bytes.size());
    return bytes;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t h =
        type == DataType::kBfloat16 ? ff::FloatToBf16(x[i]) : ff::FloatToF16(x[i], ff::F16Round::kNearestEven);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
  return bytes;
}

std::vector<float> DecodeAs(DataType type, absl::Span<const uint8_t> bytes) {
  std::vector<float> x(bytes.size() / numerics::DTypeBytes(type));
  if (type == DataType::kFloat32) {
    if (!x.empty()) std::memcpy(x.data(), bytes.data(), x.size() * 4);
    return x;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    x[i] = type == DataType::kBfloat16 ? ff::Bf16ToFloat(h) : ff::F16ToFloat(h);
  }
  return x;
}

}  // namespace kvt::collective
