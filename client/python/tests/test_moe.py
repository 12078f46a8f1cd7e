"""kvt.moe.ExpertAllToAll (MoE Dispatch and Combine through the collective library's C ABI) over real rank
processes: the TCP backend on CI, the CUDA backend over torch tensors where a GPU is present (skipped on CI)."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import kvt
import kvt.moe as km
from ranks import FileStore, collective_library, run_ranks  # noqa: F401 (an autouse fixture)

HIDDEN, TOPK, EXPERTS = 64, 3, 8


def _routing(rank: int, n: int) -> Any:
    """Tokens, top-k expert ids (distinct per token, a -1 in some) and weights of one rank."""
    rng = np.random.default_rng(500 + rank)
    tokens = rng.standard_normal((n, HIDDEN)).astype(np.float32)
    experts = np.array([rng.choice(EXPERTS, TOPK, replace=False) for _ in range(n)], dtype=np.int32).reshape(n, TOPK)
    experts[::5, -1] = -1  # an unused slot in every fifth token
    weights = rng.random((n, TOPK)).astype(np.float32)
    return tokens, experts, weights


def _expert(local_expert: int, rank: int, experts_per_rank: int, row: np.ndarray) -> np.ndarray:
    """A stand-in expert whose output says which expert ran: (global id + 1) x its input."""
    return row * np.float32(rank * experts_per_rank + local_expert + 1)


def _rank_body(rank: int, world: int, store_dir: str, quant: str, counts: List[int], results: Any) -> None:
    try:
        with km.ExpertAllToAll(rank, world, hidden=HIDDEN, topk=TOPK, num_experts=EXPERTS, quant=quant,
                               store=FileStore(store_dir), timeout=20.0) as ep:
            tokens, experts, weights = _routing(rank, counts[rank])
            d = ep.dispatch(tokens, experts, weights)
            per_rank = EXPERTS // world
            expert_out = np.zeros((len(d.slot_expert), HIDDEN), dtype=np.float32)
            for row in range(len(d.source_index)):
                for s in range(int(d.slot_offsets[row]), int(d.slot_offsets[row + 1])):
                    expert_out[s] = _expert(int(d.slot_expert[s]), rank, per_rank, d.rows[row])
            out = ep.combine(d, expert_out)
            # A second dispatch and combine on the same exchange (the other buffer set).
            d2 = ep.dispatch(tokens[:1], experts[:1], weights[:1])
            out2 = ep.combine(d2, np.zeros((len(d2.slot_expert), HIDDEN), dtype=np.float32))
            results.put((rank, {"tokens": tokens, "experts": experts, "weights": weights, "out": out,
                                "out2": out2, "rows": d.rows, "source_rank": d.source_rank,
                                "source_index": d.source_index, "rank_offsets": d.rank_offsets,
                                "slot_offsets": d.slot_offsets, "slot_expert": d.slot_expert,
                                "slot_weight": d.slot_weight}))
    except BaseException as e:
        results.put((rank, repr(e)))


def _run(tmp_path: Path, world: int, quant: str, counts: List[int]) -> Dict[int, Any]:
    store = tmp_path / f"store-{time.monotonic_ns()}"
    store.mkdir()
    got = run_ranks(multiprocessing.get_context("spawn"), _rank_body,
                    lambda r: (r, world, str(store), quant, counts), world, timeout=120)
    errors = {r: got.get(r, "did not report") for r in range(world) if not isinstance(got.get(r), dict)}
    assert not errors, errors
    return got


@pytest.mark.parametrize("quant", ["none", "fp8"])
def test_every_token_reaches_the_ranks_of_its_experts_and_combines_to_its_weighted_sum(tmp_path: Path,
                                                                                        quant: str) -> None:
    world, counts = 2, [37, 0]  # rank 1 dispatches nothing and still receives and combines
    got = _run(tmp_path, world, quant, counts)
    per_rank = EXPERTS // world
    for r in range(world):
        g = got[r]
        # Rows arrive rank-major, each rank's in increasing source index, and are the tokens that have an
        # expert here (and only those).
        want_rows = []
        for src in range(world):
            exps = got[src]["experts"]
            mine = [i for i in range(counts[src]) if any(e >= 0 and e // per_rank == r for e in exps[i])]
            want_rows += [(src, i) for i in mine]
            lo, hi = int(g["rank_offsets"][src]), int(g["rank_offsets"][src + 1])
            assert list(g["source_index"][lo:hi]) == mine
            assert all(g["source_rank"][lo:hi] == src)
        assert len(g["source_index"]) == len(want_rows)
        for row, (src, i) in enumerate(want_rows):
            token = got[src]["tokens"][i]
            if quant == "none":
                assert np.array_equal(g["rows"][row], token)
            else:  # FP8 E4M3 with a scale per 128 values: within a few percent of the group's largest value
                assert np.max(np.abs(g["rows"][row] - token)) <= 0.07 * np.max(np.abs(token))
            slots = range(int(g["slot_offsets"][row]), int(g["slot_offsets"][row + 1]))
            want = [(e - r * per_rank, w) for e, w in zip(got[src]["experts"][i], got[src]["weights"][i])
                    if e >= 0 and e // per_rank == r]
            assert [(int(g["slot_expert"][s]), float(g["slot_weight"][s])) for s in slots] == \
                [(int(e), float(w)) for e, w in want]
    # Combine: each token's weighted sum of its experts' outputs, computed from the rows as they arrived (what
    # the experts saw: FP8-dequantized, or exact), in float64 against the exchange's fp32 sums.
    arrived = {}
    for r in range(world):
        g = got[r]
        for row in range(len(g["source_index"])):
            arrived[(int(g["source_rank"][row]), int(g["source_index"][row]))] = g["rows"][row].astype(np.float64)
    for r in range(world):
        exps, ws = got[r]["experts"], got[r]["weights"]
        want = np.zeros((counts[r], HIDDEN), dtype=np.float64)
        for i in range(counts[r]):
            for e, w in zip(exps[i], ws[i]):
                if e >= 0:
                    want[i] += float(w) * (e + 1) * arrived[(r, i)]
        assert got[r]["out"].shape == (counts[r], HIDDEN)
        assert np.max(np.abs(got[r]["out"] - want), initial=0.0) <= 1e-5 * max(1.0, float(np.max(np.abs(want),
                                                                                                  initial=1.0)))
        assert got[r]["out2"].shape == (min(1, counts[r]), HIDDEN)
        assert not np.any(got[r]["out2"])


def _bad_body(rank: int, world: int, store_dir: str, results: Any) -> None:
    outcomes: List[str] = []
    try:
        with km.ExpertAllToAll(rank, world, hidden=HIDDEN, topk=TOPK, num_experts=EXPERTS,
                               store=FileStore(store_dir), timeout=20.0) as ep:
            tokens, experts, weights = _routing(rank, 4)
            for args in ((tokens.astype(np.float64), experts, weights), (tokens[:, :10].copy(), experts, weights),
                         (tokens, experts.astype(np.int64), weights), (tokens, experts[:3], weights),
                         (tokens.T.copy().T, experts, weights), ([1.0], experts, weights)):
                try:
                    ep.dispatch(*args)
                    outcomes.append("accepted")
                except kvt.InvalidArgument as e:
                    outcomes.append(f"refused: {e}")
            d = ep.dispatch(tokens, experts, weights)  # the group is still in step
            try:
                ep.combine(d, np.zeros((len(d.slot_expert) + 1, HIDDEN), dtype=np.float32))
                outcomes.append("accepted")
            except kvt.InvalidArgument as e:
                outcomes.append(f"refused: {e}")
            try:
                ep.combine(km.Dispatched(rows=None, source_index=None, slot_expert=None, slot_weight=None),
                           np.zeros((0, HIDDEN), dtype=np.float32))
                outcomes.append("accepted")
            except kvt.InvalidArgument as e:
                outcomes.append(f"refused: {e}")
            out = ep.combine(d, np.ones((len(d.slot_expert), HIDDEN), dtype=np.float32))
            outcomes.append(f"combined {out.shape}")
        try:
            ep.dispatch(tokens, experts, weights)
            outcomes.append("accepted after close")
        except kvt.KvtError as e:
            outcomes.append(f"closed: {type(e).__name__}")
        results.put((rank, outcomes))
    except BaseException as e:
        results.put((rank, repr(e)))


def test_bad_inputs_are_refused_before_anything_is_sent_and_the_group_stays_in_step(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    got = run_ranks(multiprocessing.get_context("spawn"), _bad_body, lambda r: (r, 2, str(store)), 2, timeout=120)
    for r in range(2):
        outcomes = got.get(r)
        assert isinstance(outcomes, list), outcomes
        assert all(o.startswith("refused") for o in outcomes[:8]), outcomes
        assert "float32" in outcomes[0] and f"[n, {HIDDEN}]" in outcomes[1] and "int32" in outcomes[2], outcomes
        assert "as many" in outcomes[3] and "contiguous" in outcomes[4], outcomes
        assert "shape" in outcomes[6] and "dispatch returned" in outcomes[7], outcomes
        assert outcomes[8] == f"combined (4, {HIDDEN})", outcomes
        assert outcomes[9] == "closed: FailedPrecondition", outcomes


def test_bad_construction_is_refused_with_a_message() -> None:
    with pytest.raises(kvt.InvalidArgument, match="quant"):
        km.ExpertAllToAll(0, 1, hidden=8, topk=1, num_experts=1, peers=["127.0.0.1:1"], quant="int4")
    with pytest.raises(kvt.InvalidArgument, match="hidden"):
        km.ExpertAllToAll(0, 1, hidden=0, topk=1, num_experts=1, peers=["127.0.0.1:1"])
    with pytest.raises(kvt.InvalidArgument, match="backend"):
        km.ExpertAllToAll(0, 1, hidden=8, topk=1, num_experts=1, peers=["127.0.0.1:1"], backend="nccl")
    with pytest.raises(kvt.InvalidArgument, match=r"topk_experts\[0\] is 3"):
        with km.ExpertAllToAll(0, 1, hidden=8, topk=1, num_experts=1, peers=["127.0.0.1:0"]) as ep:
            ep.dispatch(np.zeros((1, 8), np.float32), np.full((1, 1), 3, np.int32), np.ones((1, 1), np.float32))


def _stand_in_experts(ep: km.ExpertAllToAll, d: km.Dispatched) -> Any:
    """Experts on the GPU, reading the result where the exchange left it: (global id + 1) x row, per slot."""
    import torch
    per_rank = EXPERTS // ep.world_size
    scale = torch.where(d.slot_expert >= 0, d.slot_expert + ep.rank * per_rank + 1, 0).to(d.rows.dtype)
    return (d.rows[:, None, :] * scale[..., None]).contiguous()


def _cuda_body(rank: int, world: int, store_dir: str, n: int, results: Any) -> None:
    import torch
    try:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        inputs = [_routing(rank, n), _routing(rank + 10, n)]
        with km.ExpertAllToAll(rank, world, hidden=HIDDEN, topk=TOPK, num_experts=EXPERTS, backend="cuda",
                               quant="none", dtype=torch.float32, max_tokens=64, store=FileStore(store_dir),
                               timeout=30.0) as ep:
            dev = f"cuda:{ep.device}"
            on_gpu = [tuple(torch.from_numpy(a).to(dev) for a in inp) for inp in inputs]
            eager, counts = [], []
            for tok, exp, w in on_gpu:
                d = ep.dispatch(tok, exp, w)
                eager.append(ep.combine(d, _stand_in_experts(ep, d)))
                counts.append(d.counts.clone())
            ep.synchronize()
            # Dispatch, experts and combine captured once in a CUDA graph, replayed on alternating inputs: each
            # replay must equal the eager result of its inputs (a replay that reused a captured epoch would pass
            # its waits on the previous call's signals and read stale rows).
            static = [t.clone() for t in on_gpu[0]]
            static_out = torch.empty_like(eager[0])
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up outside the capture
                d = ep.dispatch(*static)
                ep.combine(d, _stand_in_experts(ep, d), out=static_out)
            torch.cuda.current_stream().wait_stream(side)
            ep.synchronize()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    d = ep.dispatch(*static)
                    ep.combine(d, _stand_in_experts(ep, d), out=static_out)
                replays = []
                for i in (0, 1, 0, 1):
                    for dst, src in zip(static, on_gpu[i]):
                        dst.copy_(src)
                    graph.replay()
                    ep.synchronize()
                    replays.append("ok" if torch.equal(static_out, eager[i]) else f"replay of input {i} differs")
                captured = "yes" if all(r == "ok" for r in replays) else ", ".join(replays)
            except Exception as e:  # reported, not hidden: the test asserts on it
                captured = f"error: {e}"
            results.put((rank, {"inputs": inputs, "out": [o.cpu().numpy() for o in eager],
                                "counts": [c.cpu().numpy() for c in counts], "captured": captured}))
    except BaseException as e:
        results.put((rank, repr(e)))


def test_cuda_backend_dispatches_and_combines_torch_tensors_in_place_and_from_a_cuda_graph(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    world, n = 2, 40
    store = tmp_path / "store"
    store.mkdir()
    got = run_ranks(multiprocessing.get_context("spawn"), _cuda_body, lambda r: (r, world, str(store), n), world,
                    timeout=240)
    errors = {r: got.get(r, "did not report") for r in range(world) if not isinstance(got.get(r), dict)}
    assert not errors, errors
    per_rank = EXPERTS // world
    for r in range(world):
        assert got[r]["captured"] == "yes", got[r]["captured"]
        for which in (0, 1):
            # Rows received from each rank: its tokens with an expert here.
            for src in range(world):
                exps = got[src]["inputs"][which][1]
                want = sum(any(e >= 0 and e // per_rank == r for e in exps[i]) for i in range(n))
                assert int(got[r]["counts"][which][src]) == want
            toks, exps, ws = got[r]["inputs"][which]
            want_out = np.zeros((n, HIDDEN), dtype=np.float64)
            for i in range(n):
                for e, w in zip(exps[i], ws[i]):
                    if e >= 0:
                        want_out[i] += float(w) * (e + 1) * toks[i].astype(np.float64)
            assert np.max(np.abs(got[r]["out"][which] - want_out)) <= 1e-5 * float(np.max(np.abs(want_out)))
