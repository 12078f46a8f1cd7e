"""Generates the gRPC stubs (build_stubs.py) before setuptools does anything with the package (metadata,
editable or wheel build, sdist), since kvt._proto must exist for all of them; the rest is in pyproject.toml."""
import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402  (beside this file)


def generate_stubs() -> None:
    """Fresh stubs from the checkout's protos; an unpacked sdist (no protos beside it) keeps those it ships."""
    protos = build_stubs.default_repo_root() / build_stubs.PROTO_PACKAGE_DIR
    if protos.is_dir():
        build_stubs.generate()
    elif not (build_stubs.default_out_dir() / "client_pb2.py").exists():
        raise RuntimeError(f"neither {protos} nor generated stubs in {build_stubs.default_out_dir()}: "
                           "build the kvt package from a kvt checkout")


generate_stubs()
setup()
