"""CUDA with the system nvcc (/usr/local/cuda/bin/nvcc), no rules_cuda, fully offline.

    kvt_cuda_library(name = "lynx_kernels", srcs = ["lynx_kernels.cu"], hdrs = ["lynx_cuda.h"], deps = [...])

compiles each .cu to an object for sm_90 plus compute_90 PTX (so newer GPUs JIT it), and wraps the objects in a
cc_library linked against the static CUDA runtime. The .cu files may include headers from `hdrs`, `textual_hdrs`
and `cu_hdrs` (headers of other packages the .cu reads, e.g. "//codec:scheme.h": nvcc runs in a sandbox that
holds only declared inputs) by repo-root paths; system headers (Abseil) come from /usr/include. `copts` are
extra nvcc flags for this target, e.g. ["--fmad=false"] where results must match a CPU reference bit for bit.
Binaries and tests that use one need `linkstatic = True` (fastbuild tests otherwise load each library as a .so that
cannot see the executable's static cudart). Builds on machines with no GPU; only running needs one.
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

def kvt_cuda_library(name, srcs, hdrs = [], textual_hdrs = [], cu_hdrs = [], deps = [], copts = [], visibility = None):
    objs = []
    for src in srcs:
        obj = src[:-len(".cu")] + ".cu.o"
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + textual_hdrs + cu_hdrs,
            outs = [obj],
            # Each nvcc gets its own temporary directory: sandboxed actions share /tmp but each has its own PID
            # namespace, so two concurrent nvcc calls both named their files tmpxft_00000002_... and one failed
            # with "cudafe1.cpp: No such file or directory". The genrule shell runs under set -e: nvcc's status is
            # caught with || so that the directory is removed on failure too.
            cmd = ("tmp=$$(mktemp -d /tmp/kvt-nvcc.XXXXXXXX) && rc=0 && " +
                   "{ TMPDIR=$$tmp %s %s %s -c $(location %s) -o $@ || rc=$$?; }; " +
                   "rm -rf $$tmp; exit $$rc") % (NVCC, CUDA_FLAGS, " ".join(copts), src),
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
