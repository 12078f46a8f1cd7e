"""Helpers for the collectives' tests, which run one process per rank: the fixture that finds the collective
library, a file-backed store with the two calls the collectives' bootstrap makes (torch.distributed's Store has
them too), and a runner that collects each rank's report by a deadline and kills what is left."""
from __future__ import annotations

import os
import queue
import time
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pytest

__all__ = ["FileStore", "collective_library", "run_ranks"]

_REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", autouse=True)
def collective_library() -> str:
    """libkvt_collective.so for the module's tests ($KVT_COLLECTIVE_LIB, else the checkout's bazel-bin), exported
    as KVT_COLLECTIVE_LIB for the rank processes; a clear failure when it is not built."""
    path = os.environ.get("KVT_COLLECTIVE_LIB") or str(_REPO / "bazel-bin/collective/libkvt_collective.so")
    if not Path(path).exists():
        pytest.fail(f"no {path}: run `bazel build //collective:libkvt_collective.so` or set KVT_COLLECTIVE_LIB",
                    pytrace=False)
    os.environ["KVT_COLLECTIVE_LIB"] = path
    return path


class FileStore:
    """The two calls of a torch.distributed Store the bootstrap makes, over files (get waits for the key)."""

    def __init__(self, root: str, timeout: float = 30.0) -> None:
        self.root, self.timeout = Path(root), timeout

    def set(self, key: str, value: Any) -> None:
        path = self.root / key.replace("/", "_")
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(value.encode() if isinstance(value, str) else value)
        tmp.rename(path)

    def get(self, key: str) -> bytes:
        path = self.root / key.replace("/", "_")
        deadline = time.monotonic() + self.timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {key} in the store")
            time.sleep(0.01)
        return path.read_bytes()


def run_ranks(ctx: Any, target: Callable[..., None], args: Callable[[int], Tuple[Any, ...]], world: int,
               timeout: float = 60.0) -> Dict[int, Any]:
    """Starts target(*args(r), results) for each rank r in its own process; each puts (r, *payload) on
    `results`. Returns {rank: payload (its one value, or the tuple)} of the ranks that reported by the deadline
    (a rank that died silently is missing), then joins the processes and kills any left running."""
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args(r), results)) for r in range(world)]
    for p in procs:
        p.start()
    out: Dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < world and time.monotonic() < deadline:
            try:
                rank, *payload = results.get(timeout=0.5)
            except queue.Empty:  # a rank may have died without reporting
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
                continue
            out[rank] = payload[0] if len(payload) == 1 else tuple(payload)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert len(out) == world or any(p.exitcode not in (0, None) for p in procs), f"ranks reported {sorted(out)}"
    return out
