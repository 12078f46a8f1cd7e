"""Compiler options of every codec target.

-ffp-contract=off: the codes must be bit-identical across the scalar reference, the AVX2/AVX-512 paths (whose
functions enable FMA-capable targets) and the CUDA kernels, so no a*b+c may be fused behind our back.
"""

CODEC_COPTS = ["-ffp-contract=off"]
