"""The package builds from the checkout: stubs come from proto/ (never edited by hand) and pip installs it."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # client/python
sys.path.insert(0, str(PACKAGE_DIR))
import build_stubs  # noqa: E402


def copy_checkout(dest: Path) -> Path:
    """The package and the protos in the checkout's layout (dest/client/python, dest/proto/kvt/v1), so a build
    writes nothing into the real tree. Returns the package dir."""
    package = dest / "client" / "python"
    shutil.copytree(PACKAGE_DIR, package, ignore=shutil.ignore_patterns("_proto", "_lib", "build", "*.egg-info",
                                                                         "__pycache__"))
    shutil.copytree(build_stubs.default_repo_root() / "proto" / "kvt" / "v1", dest / "proto" / "kvt" / "v1")
    return package


def test_stubs_are_generated_from_the_protos_with_relative_imports(tmp_path: Path) -> None:
    out = build_stubs.generate(out_dir=tmp_path / "_proto")
    names = sorted(p.name for p in out.glob("*.py"))
    assert {"__init__.py", "client_pb2.py", "client_pb2_grpc.py", "layout_pb2.py"} <= set(names)
    for path in out.glob("*.py*"):
        text = path.read_text()
        assert "from proto." not in text and "import proto." not in text, path.name
    assert "from . import layout_pb2" in (out / "client_pb2.py").read_text()


def test_regenerating_replaces_stale_stubs(tmp_path: Path) -> None:
    out = tmp_path / "_proto"
    out.mkdir()
    (out / "stale_pb2.py").write_text("raise ImportError('stale')\n")
    build_stubs.generate(out_dir=out)
    assert not (out / "stale_pb2.py").exists()


def test_a_checkout_without_protos_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        build_stubs.generate(repo_root=tmp_path, out_dir=tmp_path / "_proto")


def test_pip_installs_the_package_with_its_stubs(tmp_path: Path) -> None:
    if importlib.util.find_spec("pip") is None or importlib.util.find_spec("setuptools") is None:
        pytest.skip("this interpreter has no pip or setuptools")
    package = copy_checkout(tmp_path / "checkout")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                    "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--target", str(target),
                    str(package)], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert (target / "kvt" / "_proto" / "client_pb2_grpc.py").exists()
    assert (target / "kvt" / "py.typed").exists()
    assert (target / "kvt" / "vllm" / "connector.py").exists()  # the vLLM connector travels with the client
    if os.environ.get("KVT_COLLECTIVE_LIB"):  # the Bazel suite has the library: the package bundles it
        assert (target / "kvt" / "_lib" / "libkvt_collective.so").stat().st_size > 0
    probe = ("import kvt, sys; assert kvt.__file__.startswith(sys.argv[1]), kvt.__file__; "
             "print(kvt.Client.__name__, kvt.KvLayout(num_layers=1, num_blocks=1, block_tokens=1, num_kv_heads=1, "
             "head_dim=1).to_proto().num_layers)")
    result = subprocess.run([sys.executable, "-c", probe, str(target)], check=True, capture_output=True, text=True,
                            cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert result.stdout.split() == ["Client", "1"]
    if os.environ.get("KVT_COLLECTIVE_LIB"):  # installed, kvt.collective finds its bundled library by itself
        probe = ("import kvt.collective as kc; print(kc.Communicator(0, 1, peers=['127.0.0.1:0']).world_size, "
                 "kc.library_path())")
        result = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True,
                                cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
        world, path = result.stdout.split()
        assert world == "1" and path == str(target / "kvt" / "_lib" / "libkvt_collective.so"), result.stdout
