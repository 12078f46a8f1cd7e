"""CUDA with the system nvcc (/usr/local/cuda/bin/nvcc), no rules_cuda, fully offline.

    kvt_cuda_library(name = "lynx_kernels", srcs = ["lynx_kernels.cu"], hdrs = ["lynx_cuda.h"], deps = [...])

compiles each .cu to an object for sm_90 plus compute_90 PTX (so newer GPUs JIT it), and wraps the objects in a
cc_library linked against the static CUDA runtime. The .cu files may include headers from `textual_hdrs` and
`deps`' headers by repo-root paths. Builds on machines with no GPU; only running needs one.
"""

NVCC = "/usr/local/cuda/bin/nvcc"
CUDA_FLAGS = " ".join([
    "-std=c++17",
    "-O3",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
    "-Xcompiler -fPIC",
    "--expt-relaxed-constexpr",
    "-I.",
    "-I$(GENDIR)",
])

def kvt_cuda_library(name, srcs, hdrs = [], textual_hdrs = [], deps = [], visibility = None):
    objs = []
    for src in srcs:
        obj = src[:-len(".cu")] + ".cu.o"
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + textual_hdrs,
            outs = [obj],
            cmd = "%s %s -c $(location %s) -o $@" % (NVCC, CUDA_FLAGS, src),
            message = "nvcc " + src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        textual_hdrs = textual_hdrs,
        deps = deps + ["//tools/bazel:cudart_static"],
        visibility = visibility,
    )
