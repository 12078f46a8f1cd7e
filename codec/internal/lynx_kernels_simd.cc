// Placeholder resolution of the vectorized kernels to the reference until the SIMD loops land.
#include "codec/internal/lynx_kernels.h"

namespace kvt::codec::internal {

const LynxKernels& Avx2LynxKernels() { return ReferenceLynxKernels(); }
const LynxKernels& Avx512LynxKernels() { return ReferenceLynxKernels(); }

}  // namespace kvt::codec::internal
