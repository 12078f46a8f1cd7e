#include "codec/options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvt::codec {

bool ValidTopWidth(float w) {
  return (w == 0.0f && !std::signbit(w)) || (w >= kMinTopWidth && w <= kMaxTopWidth);
}

absl::Status CodecOptions::Validate() const {
  if (chunk_tokens < 0 || chunk_tokens > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("CodecOptions.chunk_tokens = ", chunk_tokens, " outside 0..256 (0: the scheme's own)"));
  }
  if (!std::isfinite(alpha) || !(alpha >= kMinAlpha) || !(alpha <= kMaxAlpha)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CodecOptions.alpha = ", alpha, " outside [", kMinAlpha, ", ", kMaxAlpha, "]"));
  }
  if (!ValidTopWidth(top_width)) {
    return absl::InvalidArgumentError(absl::StrCat("CodecOptions.top_width = ", top_width, " is neither 0 nor in [",
                                                   kMinTopWidth, ", ", kMaxTopWidth, "]"));
  }
  switch (centering) {
    case Centering::kMidrange:
    case Centering::kMean:
      break;
    default:
      return absl::InvalidArgumentError("CodecOptions.centering is not a known Centering");
  }
  switch (anchor_rule) {
    case AnchorRule::kCodeCentre:
    case AnchorRule::kValueCentre:
    case AnchorRule::kConditionalMean:
      break;
    default:
      return absl::InvalidArgumentError("CodecOptions.anchor_rule is not a known AnchorRule");
  }
  if (non_finite != NonFinitePolicy::kReject) {
    return absl::InvalidArgumentError("CodecOptions.non_finite is not a known NonFinitePolicy");
  }
  switch (impl) {
    case CodecImpl::kAuto:
    case CodecImpl::kReference:
    case CodecImpl::kAvx2:
    case CodecImpl::kAvx512:
      break;
    default:
      return absl::InvalidArgumentError("CodecOptions.impl is not a known CodecImpl");
  }
  return absl::OkStatus();
}

bool ImplAvailable(CodecImpl impl) {
  switch (impl) {
    case CodecImpl::kAuto:
    case CodecImpl::kReference:
      return true;
    case CodecImpl::kAvx2:
      return __builtin_cpu_supports("avx2");
    case CodecImpl::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
}

CodecImpl ResolveImpl(CodecImpl impl) {
  if (impl != CodecImpl::kAuto) return impl;
  if (ImplAvailable(CodecImpl::kAvx512)) return CodecImpl::kAvx512;
  if (ImplAvailable(CodecImpl::kAvx2)) return CodecImpl::kAvx2;
  return CodecImpl::kReference;
}

const char* ImplName(CodecImpl impl) {
  switch (impl) {
    case CodecImpl::kAuto:
      return "auto";
    case CodecImpl::kReference:
      return "reference";
    case CodecImpl::kAvx2:
      return "avx2";
    case CodecImpl::kAvx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace kvt::codec
