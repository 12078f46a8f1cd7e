"""kvt.collective: the collectives' C ABI (libkvt_collective.so) from Python, one process per rank.

Host backends (TCP, UCX over tcp on loopback) run everywhere; the CUDA backend's tests need a GPU and skip
without one (ranks share it when there are fewer GPUs than ranks). The library comes from $KVT_COLLECTIVE_LIB
(the Bazel suite sets it), else bazel-bin of this checkout.
"""
from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
import pytest

import kvt
import kvt.collective as kc
from ranks import FileStore, collective_library, run_ranks  # noqa: F401 (an autouse fixture)



def _inputs(rank: int, n: int) -> np.ndarray:
    x = np.random.default_rng(100 + rank).standard_normal(n).astype(np.float32)
    x[rank * 7 % n] = 40.0  # an outlier per rank
    return x


def _run_rank(rank: int, world: int, store_dir: str, body: Callable[[kc.Communicator], Any], backend: str,
              kwargs: Dict[str, Any], results: Any) -> None:
    try:
        with kc.Communicator(rank, world, store=FileStore(store_dir), backend=backend, timeout=20.0,
                             **kwargs) as comm:
            results.put((rank, body(comm)))
    except BaseException as e:  # reported to the parent, which asserts on it
        results.put((rank, e))


def _group(world: int, tmp_path: Path, body: Callable[[kc.Communicator], Any], backend: str = "tcp",
           timeout: float = 60.0, **kwargs: Any) -> List[Any]:
    """Runs body(comm) on `world` forked ranks; each rank's return value or exception, rank order."""
    store_dir = tmp_path / f"store-{time.monotonic_ns()}"
    store_dir.mkdir()
    got = run_ranks(multiprocessing.get_context("fork"), _run_rank,
                     lambda r: (r, world, str(store_dir), body, backend, kwargs), world, timeout)
    return [got.get(r) for r in range(world)]


def _reduce(bits: Any, n: int = 20000) -> Callable[[kc.Communicator], np.ndarray]:
    def body(comm: kc.Communicator) -> np.ndarray:
        x = _inputs(comm.rank, n)
        comm.all_reduce(x, bits=bits)
        return x
    return body


@pytest.mark.parametrize("backend", ["tcp", "ucx"])
def test_all_reduce_is_the_same_on_every_rank_and_close_to_the_exact_sum(backend: str, tmp_path: Path) -> None:
    world, n = 3, 20000
    kwargs = {"ucx_tls": "tcp", "ucx_net_devices": "lo"} if backend == "ucx" else {}
    exact = sum(_inputs(r, n).astype(np.float64) for r in range(world))
    errors = {}
    for bits in (0, 8, (4, 8)):
        got = _group(world, tmp_path, _reduce(bits, n), backend=backend, **kwargs)
        for r, g in enumerate(got):
            assert isinstance(g, np.ndarray), f"rank {r}: {g!r}"
            assert g.tobytes() == got[0].tobytes(), f"rank {r} differs from rank 0 (bits {bits})"
        errors[str(bits)] = float(np.abs(got[0] - exact).max())
    # Unquantized: fp32 rounding only. 8-bit groups of 128 with a 40.0 outlier: steps of ~45/255 per value per
    # step; 4-bit reduce-scatter: ~16x coarser. The widths must order the errors.
    assert errors["0"] < 1e-4, errors
    assert errors["8"] < 0.5, errors
    assert errors["8"] < errors["(4, 8)"] < 8.0, errors


class CountingFileStore(FileStore):
    """FileStore with torch's `add` (a counter per key), under a lock file."""

    def add(self, key: str, amount: int) -> int:
        import fcntl
        with open(self.root / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = self.root / key.replace("/", "_")
            value = (int(path.read_text()) if path.exists() else 0) + amount
            path.write_text(str(value))
            return value


def _two_groups_on_one_store(rank: int, store_dir: str, results: Any) -> None:
    try:
        store = CountingFileStore(store_dir)
        sums = []
        for _ in range(2):  # the second group must not read the first one's (closed) ports
            with kc.Communicator(rank, 2, store=store, timeout=20.0) as comm:
                x = np.full(64, float(rank + 1), np.float32)
                comm.all_reduce(x, bits=0)
                sums.append(float(x[0]))
        results.put((rank, sums))
    except BaseException as e:
        results.put((rank, repr(e)))


def test_groups_made_one_after_another_on_one_store_get_keys_of_their_own(tmp_path: Path) -> None:
    got = run_ranks(multiprocessing.get_context("fork"), _two_groups_on_one_store, lambda r: (r, str(tmp_path)), 2)
    assert got == {0: [3.0, 3.0], 1: [3.0, 3.0]}, got


def test_explicit_peers_and_torch_cpu_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    peers = [f"127.0.0.1:{p}" for p in ports]
    def rank_main(rank: int, results: Any) -> None:
        try:
            with kc.Communicator(rank, 2, peers=peers, timeout=20.0) as comm:
                t = torch.full((1000,), float(rank + 1))
                out = torch.empty_like(t)
                comm.all_reduce(t, bits=0, out=out)
                results.put((rank, out.tolist(), t.tolist()))
        except BaseException as e:
            results.put((rank, repr(e), None))

    got = run_ranks(multiprocessing.get_context("fork"), rank_main, lambda r: (r,), 2)
    for r in range(2):
        out, unchanged = got[r]
        assert out == [3.0] * 1000, f"rank {r}: {out!r}"[:200]
        assert unchanged == [float(r + 1)] * 1000  # out= leaves the input alone


def test_nan_input_is_refused_on_its_rank_and_the_peer_is_told_or_times_out(tmp_path: Path) -> None:
    def body(comm: kc.Communicator) -> Any:
        x = _inputs(comm.rank, 1000)
        if comm.rank == 0:
            x[5] = np.nan
        try:
            comm.all_reduce(x, timeout=3.0)
        except kvt.KvtError as e:
            return e
        return "no error"

    got = _group(2, tmp_path, body)
    assert isinstance(got[0], kvt.InvalidArgument), got
    assert "finite" in got[0].message or "NaN" in got[0].message, got[0].message
    # The host path does not send a local error to its peers: rank 1 sees rank 0 leave or go silent.
    assert isinstance(got[1], (kvt.Unavailable, kvt.DeadlineExceeded)), got[1]


def test_a_killed_peer_gives_unavailable_or_the_deadline_not_a_hang(tmp_path: Path) -> None:
    def body(comm: kc.Communicator) -> Any:
        if comm.rank == 1:
            os._exit(3)  # dies without closing
        start = time.monotonic()
        try:
            comm.all_reduce(_inputs(0, 5000), timeout=3.0)
        except kvt.KvtError as e:
            return (e, time.monotonic() - start)
        return ("no error", 0.0)

    got = _group(2, tmp_path, body)
    error, waited = got[0]
    assert isinstance(error, (kvt.Unavailable, kvt.DeadlineExceeded)), error
    assert waited < 10.0


def test_bad_arguments_are_refused_with_a_message_and_the_group_stays_usable(tmp_path: Path) -> None:
    def body(comm: kc.Communicator) -> List[str]:
        seen = []
        bad = [
            lambda: comm.all_reduce(np.zeros(8, np.float64)),                   # wrong dtype
            lambda: comm.all_reduce(np.zeros((8, 8), np.float32)[:, ::2]),        # not contiguous
            lambda: comm.all_reduce(np.zeros(8, np.float32), out=np.zeros(9, np.float32)),
            lambda: comm.all_reduce(np.zeros(8, np.float32), bits=9),             # the C++ side refuses
            lambda: comm.all_reduce(np.zeros(8, np.float32), group_size=0),
            lambda: comm.all_reduce(np.zeros(8, np.float32), timeout=-1.0),
            lambda: comm.all_reduce([1.0, 2.0]),
            lambda: comm.all_reduce(np.zeros(8, np.float32), bits=(4, 8, 8)),
        ]
        for call in bad:
            try:
                call()
                seen.append("accepted")
            except kvt.InvalidArgument as e:
                seen.append(e.message)
        x = np.arange(16, dtype=np.float32)  # still in step after the refusals
        comm.all_reduce(x, bits=0)
        seen.append(x.tolist())
        return seen

    (seen,) = _group(1, tmp_path, body)
    assert "accepted" not in seen, seen
    assert "float32" in seen[0] and "contiguous" in seen[1] and "shape" in seen[2], seen
    assert "step width" in seen[3] and "got 9" in seen[3] and "group_size" in seen[4], seen
    assert seen[-1] == list(range(16))


def test_a_closed_communicator_and_bad_construction_raise(tmp_path: Path) -> None:
    def body(comm: kc.Communicator) -> str:
        comm.close()
        try:
            comm.all_reduce(np.zeros(4, np.float32))
        except kvt.FailedPrecondition as e:
            return e.message
        return "accepted"

    assert "closed" in _group(1, tmp_path, body)[0]
    fresh = tmp_path / "refused"
    fresh.mkdir()
    with pytest.raises(kvt.InvalidArgument, match="timeout"):
        kc.Communicator(0, 1, store=FileStore(str(fresh)), timeout=0)
    assert list(fresh.iterdir()) == [], "a refused construction published an address"
    with pytest.raises(kvt.InvalidArgument, match="backend"):
        kc.Communicator(0, 1, peers=["127.0.0.1:1"], backend="gloo")
    with pytest.raises(kvt.InvalidArgument, match="exactly one"):
        kc.Communicator(0, 1)
    with pytest.raises(kvt.InvalidArgument, match="rank 2"):
        kc.Communicator(2, 2, peers=["a:1", "b:2"])
    with pytest.raises(kvt.InvalidArgument):
        kc.Communicator(0, 2, peers=["127.0.0.1:1", "no-port"])


def test_a_missing_library_says_how_to_build_it() -> None:
    code = ("import kvt, kvt.collective as kc\n"
            "try:\n    kc.Communicator(0, 1, peers=['127.0.0.1:1'])\n"
            "except kvt.FailedPrecondition as e:\n    print('FP', e.message)\n")
    env = dict(os.environ, KVT_COLLECTIVE_LIB="/nonexistent/libkvt_collective.so")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "FP" in out.stdout and "bazel build //collective:libkvt_collective.so" in out.stdout, out


def test_the_default_one_shot_threshold_fits_the_workspace_and_bad_values_are_refused(tmp_path: Path) -> None:
    default = kc.default_one_shot_bytes(4)
    assert default > 0
    # A smaller workspace lowers it: the one-shot region may take half the workspace, two halves a rank.
    assert 0 < kc.default_one_shot_bytes(4, 16 << 20) <= (16 << 20) // 16
    assert kc.default_one_shot_bytes(2, 256 << 10) == 0  # no room at all: never
    assert kc.default_one_shot_bytes(8) <= default
    with pytest.raises(kvt.InvalidArgument, match="one_shot_bytes"):
        kc.Communicator(0, 1, peers=["127.0.0.1:1"], one_shot_bytes=-2)


def _replay_from_graph(comm: kc.Communicator, cases: List[Any]) -> str:
    """Captures one all_reduce in a CUDA graph and replays it on each case's input in turn (other data each
    time: the same data would hide a replay that skipped its barrier and read a peer's previous values); "yes"
    when every replay equals the eager result, else what went wrong."""
    import torch
    static = cases[0][0].clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(stream):
            comm.all_reduce(static, bits=(4, 8))  # warm-up outside capture
        torch.cuda.current_stream().wait_stream(stream)
        comm.synchronize()
        with torch.cuda.graph(graph):
            comm.all_reduce(static, bits=(4, 8))
        outcomes = []
        for i, (src, want) in enumerate(cases + cases):
            static.copy_(src)
            graph.replay()
            comm.synchronize()
            outcomes.append("ok" if torch.equal(static, want) else f"replay {i} differs")
    except Exception as e:  # reported, not hidden: the test asserts on it
        return f"error: {e}"
    return "yes" if all(o == "ok" for o in outcomes) else ", ".join(outcomes)


def _cuda_rank(rank: int, world: int, store_dir: str, graphs: bool, workspace: int, values: int,
               results: Any) -> None:
    import torch
    try:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        with kc.Communicator(rank, world, store=FileStore(store_dir), backend="cuda", timeout=30.0,
                             workspace_bytes=workspace) as comm:
            g = torch.Generator().manual_seed(7 + rank)
            x = torch.randn(values, generator=g).to(device="cuda", dtype=torch.bfloat16)
            eager = x.clone()
            comm.all_reduce(eager, bits=(4, 8))
            comm.synchronize()
            x2 = torch.randn(values, generator=g).to(device="cuda", dtype=torch.bfloat16)
            eager2 = x2.clone()
            comm.all_reduce(eager2, bits=(4, 8))
            comm.synchronize()
            captured = _replay_from_graph(comm, [(x, eager), (x2, eager2)]) if graphs else "not tried"
            # numpy, not tensors: a tensor crosses the queue as a file descriptor its sender must outlive.
            results.put((rank, eager.float().cpu().numpy(), x.float().cpu().numpy(), captured))
    except BaseException as e:
        results.put((rank, repr(e), None, None))


def _one_shot_rank(rank: int, world: int, store_dir: str, results: Any) -> None:
    import torch
    try:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        store = FileStore(store_dir)
        x = torch.randn(1 << 15, generator=torch.Generator().manual_seed(40 + rank)).to("cuda", torch.bfloat16)
        with kc.Communicator(rank, world, store=store, backend="cuda", one_shot_bytes=0) as two_step, \
                kc.Communicator(rank, world, store=store, backend="cuda", one_shot_bytes=1 << 20) as one_shot:
            a, b, c = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
            one_shot.all_reduce(x, bits=(4, 8), out=a)  # 64 KiB: the one-shot round
            two_step.all_reduce(x, bits=(4, 0), out=b)
            two_step.all_reduce(x, bits=(4, 8), out=c)
            one_shot.synchronize()
            two_step.synchronize()
            results.put((rank, (bool(torch.equal(a, b)), bool(torch.equal(a, c)))))
    except BaseException as e:
        results.put((rank, repr(e)))


def test_cuda_one_shot_calls_are_the_two_step_round_with_an_unquantized_second_step(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    got = run_ranks(multiprocessing.get_context("spawn"), _one_shot_rank, lambda r: (r, 2, str(tmp_path)), 2,
                    timeout=240)
    for r in range(2):
        # Equal to the two-step round with step 2 unquantized, and (so the path really differed) not to the one
        # that quantizes step 2 to 8 bits.
        assert got.get(r) == (True, False), got.get(r)


def _cuda_group(tmp_path: Path, graphs: bool, workspace: int = 64 << 20, values: int = 1 << 20) -> Dict[int, Any]:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    world = 2
    got = run_ranks(multiprocessing.get_context("spawn"), _cuda_rank,
                     lambda r: (r, world, str(tmp_path), graphs, workspace, values), world, timeout=240)
    for r in range(world):
        assert not isinstance(got[r][0], str), got[r][0]
    return got


# 2 MiB of bf16 takes the two-step round; 128 KiB, under the default one-shot threshold, the one-shot round.
@pytest.mark.parametrize("values", [1 << 20, 1 << 16], ids=["two-step", "one-shot"])
def test_cuda_backend_bf16_is_bitwise_equal_on_every_rank_and_close_to_the_sum(tmp_path: Path, values: int) -> None:
    got = _cuda_group(tmp_path, graphs=False, values=values)
    exact = sum(got[r][1].astype(np.float64) for r in got)
    for r in got:
        assert got[r][0].tobytes() == got[0][0].tobytes(), f"rank {r} differs from rank 0"
    err = float(np.abs(got[0][0] - exact).max())
    assert err < 1.0, err


@pytest.mark.parametrize("workspace,values", [(64 << 20, 1 << 20), (1 << 20, 1 << 20), (64 << 20, 1 << 16)],
                         ids=["one-round", "several-rounds", "one-shot"])
def test_cuda_backend_all_reduce_replays_from_a_cuda_graph_on_new_data(tmp_path: Path, workspace: int,
                                                                       values: int) -> None:
    # 1 MiB of workspace cannot hold the 2 MiB call's encodings at once: the captured call runs in rounds (and
    # leaves no room for a one-shot region: the default threshold becomes 0). 128 KiB: the one-shot round.
    got = _cuda_group(tmp_path, graphs=True, workspace=workspace, values=values)
    print("graph capture:", [got[r][2] for r in sorted(got)])
    assert all(got[r][2] == "yes" for r in got), [got[r][2] for r in sorted(got)]
