"""Protobuf + gRPC C++ code generation with the system protoc and grpc_cpp_plugin (Debian packages).

    kvt_cc_grpc_library(name = "kvt_service_cc", srcs = ["kvt_service.proto"], deps = [...])

generates <name>.pb.{h,cc} and .grpc.pb.{h,cc} next to each .proto and compiles them into one cc_library.
`deps` are other kvt_cc_grpc_library targets whose .protos these import (import paths are from the repo root).
"""

def kvt_cc_grpc_library(name, srcs, deps = [], grpc = True, visibility = None):
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)" if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_protos" for d in deps],
        outs = outs,
        cmd = "protoc -I. --cpp_out=$(GENDIR) %s %s" % (grpc_flags, " ".join(["$(location %s)" % s for s in srcs])),
        message = "protoc " + " ".join(srcs),
    )
    native.filegroup(name = name + "_protos", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:grpcpp"],
        visibility = visibility,
    )
