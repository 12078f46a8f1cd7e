"""Generates the gRPC stubs (build_stubs.py) before setuptools does anything with the package (metadata,
editable or wheel build, sdist), since kvt._proto must exist for all of them, and bundles the collectives'
library (kvt/_lib/libkvt_collective.so) when one is built; the rest is in pyproject.toml."""
import os
import shutil
import sys
from pathlib import Path

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


def bundle_collective_library() -> None:
    """Copies libkvt_collective.so ($KVT_COLLECTIVE_LIB, else the checkout's bazel-bin) into kvt/_lib/, where
    kvt.collective looks first after $KVT_COLLECTIVE_LIB. Without one the package still installs; kvt.collective
    then needs KVT_COLLECTIVE_LIB or the library on the loader's path."""
    given = os.environ.get("KVT_COLLECTIVE_LIB")
    source = Path(given) if given else build_stubs.default_repo_root() / "bazel-bin/collective/libkvt_collective.so"
    dest = Path(__file__).resolve().parent / "kvt" / "_lib"
    if not source.is_file():
        print(f"note: no {source}: kvt.collective will need KVT_COLLECTIVE_LIB (bazel build "
              "//collective:libkvt_collective.so)", file=sys.stderr)
        return
    dest.mkdir(exist_ok=True)
    shutil.copyfile(source, dest / "libkvt_collective.so")


generate_stubs()
bundle_collective_library()
setup()
