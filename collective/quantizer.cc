#include "collective/quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the packed layout is written in host byte order");

namespace kvt::collective {
namespace {

constexpr int kMaxGroupSize = 1 << 16;

template <typename Byte>
struct Plane {
  int width;  // 8, 4, 2 or 1 bits per value
  int shift;  // where this plane's bits sit in the code
  Byte* bytes;
};

struct GroupHeader {
  float min = 0.0f;
  float scale = 0.0f;
  float spike = 0.0f;
  uint32_t spike_index = 0;
};

size_t PlaneBytes(size_t n, int width) { return (n * width + 7) / 8; }

// Lays the planes of n codes out from `base`.
template <typename Byte>
int MakePlanes(int bits, size_t n, Byte* base, Plane<Byte> planes[3]) {
  int widths[3];
  const int count = PlaneWidths(bits, widths);
  int remaining = bits;
  for (int p = 0; p < count; ++p) {
    remaining -= widths[p];
    planes[p] = Plane<Byte>{widths[p], remaining, base};
    base += PlaneBytes(n, widths[p]);
  }
  return count;
}

}  // namespace

int PlaneWidths(int bits, int planes[3]) {
  if (bits == 8) {
    planes[0] = 8;
    return 1;
  }
  int count = 0;
  for (int width : {4, 2, 1}) {
    if (bits >= width) {
      planes[count++] = width;
      bits -= width;
    }
  }
  return count;
}

absl::StatusOr<GroupQuantizer> GroupQuantizer::Create(const QuantizerOptions& options) {
  if (options.bits < 2 || options.bits > 8) {
    return absl::InvalidArgumentError(absl::StrFormat("quantizer bits must be 2..8, got %d", options.bits));
  }
  if (options.group_size < 1 || options.group_size > kMaxGroupSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("quantizer group_size must be 1..%d, got %d", kMaxGroupSize, options.group_size));
  }
  return GroupQuantizer(options);
}

size_t GroupQuantizer::PackedSize(size_t n) const {
  const size_t groups = (n + options_.group_size - 1) / options_.group_size;
  int widths[3];
  const int count = PlaneWidths(options_.bits, widths);
  size_t size = groups * HeaderSize();
  for (int p = 0; p < count; ++p) size += PlaneBytes(n, widths[p]);
  return size;
}

absl::Status GroupQuantizer::Quantize(absl::Span<const float> in, absl::Span<uint8_t> out) const {
  const size_t n = in.size();
  if (out.size() != PackedSize(n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("quantize of %d values needs %d bytes, got %d", n, PackedSize(n), out.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(in[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cannot quantize non-finite value %f at index %d", in[i], i));
    }
  }
  const size_t group_size = options_.group_size;
  const size_t groups = (n + group_size - 1) / group_size;
  const uint32_t max_code = (1u << options_.bits) - 1;
  uint8_t* const headers = out.data();
  Plane<uint8_t> planes[3];
  const int plane_count = MakePlanes(options_.bits, n, headers + groups * HeaderSize(), planes);
  std::memset(planes[0].bytes, 0, out.size() - groups * HeaderSize());

  for (size_t g = 0; g < groups; ++g) {
    const size_t begin = g * group_size;
    const size_t end = std::min(n, begin + group_size);
    GroupHeader header;
    size_t spike = end;  // none
    if (options_.spike_reserve) {
      spike = begin;
      for (size_t i = begin + 1; i < end; ++i) {
        if (std::fabs(in[i]) > std::fabs(in[spike])) spike = i;
      }
      header.spike = in[spike];
      header.spike_index = static_cast<uint32_t>(spike - begin);
    }
    bool any = false;
    float lo = 0.0f, hi = 0.0f;
    for (size_t i = begin; i < end; ++i) {
      if (i == spike) continue;
      if (!any || in[i] < lo) lo = in[i];
      if (!any || in[i] > hi) hi = in[i];
      any = true;
    }
    header.min = lo;
    // In double, so that hi - lo cannot overflow; the fp32 scale is what both sides use.
    const double range = static_cast<double>(hi) - lo;
    header.scale = static_cast<float>(range / max_code);
    // fp32 (x - lo) * inv, unless the range overflows fp32 or the scale is so small that its inverse does.
    const float inverse = header.scale > 0.0f ? 1.0f / header.scale : 0.0f;
    const bool in_fp32 = range <= std::numeric_limits<float>::max() && std::isfinite(inverse);
    const double inverse_wide = header.scale > 0.0f ? 1.0 / header.scale : 0.0;

    for (size_t i = begin; i < end; ++i) {
      uint32_t code = 0;
      if (i != spike) {
        // Clamped, then rounded half to even (nearbyint in the default floating-point environment).
        if (in_fp32) {
          const float t = (in[i] - lo) * inverse;
          code = t <= 0.0f ? 0 : (t >= max_code ? max_code : static_cast<uint32_t>(std::nearbyint(t)));
        } else {
          const double t = (static_cast<double>(in[i]) - lo) * inverse_wide;
          code = t <= 0.0 ? 0 : (t >= max_code ? max_code : static_cast<uint32_t>(std::nearbyint(t)));
        }
      }
      for (int p = 0; p < plane_count; ++p) {
        const Plane<uint8_t>& plane = planes[p];
        const uint32_t part = (code >> plane.shift) & ((1u << plane.width) - 1);
        const size_t bit = i * plane.width;
        plane.bytes[bit / 8] |= static_cast<uint8_t>(part << (bit % 8));
      }
    }
    uint8_t* h = headers + g * HeaderSize();
    std::memcpy(h, &header.min, 4);
    std::memcpy(h + 4, &header.scale, 4);
    if (options_.spike_reserve) {
      std::memcpy(h + 8, &header.spike, 4);
      std::memcpy(h + 12, &header.spike_index, 4);
    }
  }
  return absl::OkStatus();
}

absl::Status GroupQuantizer::Dequantize(absl::Span<const uint8_t> in, absl::Span<float> out) const {
  const size_t n = out.size();
  if (in.size() != PackedSize(n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dequantize of %d values needs %d bytes, got %d", n, PackedSize(n), in.size()));
  }
  const size_t group_size = options_.group_size;
  const size_t groups = (n + group_size - 1) / group_size;
  const uint8_t* const headers = in.data();
  Plane<const uint8_t> planes[3];
  const int plane_count = MakePlanes(options_.bits, n, headers + groups * HeaderSize(), planes);

  for (size_t g = 0; g < groups; ++g) {
    const size_t begin = g * group_size;
    const size_t end = std::min(n, begin + group_size);
    GroupHeader header;
    const uint8_t* h = headers + g * HeaderSize();
    std::memcpy(&header.min, h, 4);
    std::memcpy(&header.scale, h + 4, 4);
    const float lo = header.min;
    const float scale = header.scale;
    for (size_t i = begin; i < end; ++i) {
      uint32_t code = 0;
      for (int p = 0; p < plane_count; ++p) {
        const Plane<const uint8_t>& plane = planes[p];
        const size_t bit = i * plane.width;
        const uint32_t part = (plane.bytes[bit / 8] >> (bit % 8)) & ((1u << plane.width) - 1);
        code |= part << plane.shift;
      }
      // One rounding: the same result wherever fmaf is IEEE (CUDA's __fmaf_rn included).
      out[i] = std::fma(static_cast<float>(code), scale, lo);
    }
    if (options_.spike_reserve) {
      std::memcpy(&header.spike, h + 8, 4);
      std::memcpy(&header.spike_index, h + 12, 4);
      if (header.spike_index >= end - begin) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "group %d names spike index %d in a group of %d values", g, header.spike_index, end - begin));
      }
      out[begin + header.spike_index] = header.spike;
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::collective
