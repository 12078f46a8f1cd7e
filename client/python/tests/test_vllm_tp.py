"""kvt.vllm.tp: which rank pairs of two instances of different tensor-parallel sizes move which heads, and the
connector's reading of vLLM's parallel config and of the TP sizes in a request's parameters. No daemons."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from kvt.client import Side
from kvt.vllm.config import KvtConnectorConfig
from kvt.vllm.scheduler import KvtScheduler
from kvt.vllm.tp import TpPlan, head_range, request_id
from kvt.vllm.worker import TensorParallel, tensor_parallel_of


def test_heads_follow_vllms_sharding_and_replication() -> None:
    assert [head_range(r, 4, 8) for r in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [head_range(r, 1, 8) for r in range(1)] == [(0, 8)]
    # More ranks than heads: each rank holds one head, replicated over size / heads ranks.
    assert [head_range(r, 4, 2) for r in range(4)] == [(0, 1), (0, 1), (1, 2), (1, 2)]


def _valid(size: int, heads: int) -> bool:
    return heads % size == 0 or size % heads == 0


SIZES = [(m, n, h) for h in range(1, 9) for m, n in itertools.product(range(1, 9), repeat=2)
         if _valid(m, h) and _valid(n, h)]


@pytest.mark.parametrize("prefill,decode,heads", SIZES)
def test_every_decode_head_comes_from_exactly_one_prefill_rank_that_holds_it(prefill, decode, heads) -> None:
    """Every shardable combination of 1-8 ranks on each side and 1-8 heads."""
    plan = TpPlan(prefill, decode, heads)
    pairs = plan.pairs()
    assert len(set(pairs)) == len(pairs)
    for d in range(decode):
        begin, end = plan.heads(Side.DECODE, d)
        sources = [p for p, dd in pairs if dd == d]
        covered = []
        for p in sources:
            pb, pe = plan.heads(Side.PREFILL, p)
            shared = list(range(max(begin, pb), min(end, pe)))
            assert shared, f"pair ({p}, {d}) shares no head"
            covered += shared
        assert sorted(covered) == list(range(begin, end)), (d, sources)
        assert plan.peers(Side.DECODE, d) == sources
    for p in range(prefill):
        assert plan.peers(Side.PREFILL, p) == [dd for pp, dd in pairs if pp == p]


def test_the_pairs_of_common_shapes() -> None:
    assert TpPlan(1, 1, 8).pairs() == [(0, 0)]
    assert TpPlan(2, 2, 8).pairs() == [(0, 0), (1, 1)]
    assert TpPlan(2, 1, 8).pairs() == [(0, 0), (1, 0)]
    assert TpPlan(1, 2, 8).pairs() == [(0, 0), (0, 1)]
    # Replicated on the prefill side: ranks 1 and 3 hold copies and send nothing.
    assert TpPlan(4, 2, 2).pairs() == [(0, 0), (2, 1)]
    assert TpPlan(4, 2, 2).peers(Side.PREFILL, 1) == []
    assert request_id("t", 2, 1, 7) == "t/p2d1/L7"


@pytest.mark.parametrize("prefill,decode,heads,word", [
    (3, 1, 8, "does not divide"), (1, 3, 8, "does not divide"), (6, 1, 4, "not a multiple"),
    (0, 1, 8, "positive"), (1, 1, 0, "positive"), (True, 1, 8, "positive"),
])
def test_sizes_the_model_cannot_shard_are_refused(prefill, decode, heads, word) -> None:
    with pytest.raises(ValueError, match=word):
        TpPlan(prefill, decode, heads)


def test_a_rank_outside_its_size_or_an_unspecified_side_is_refused() -> None:
    plan = TpPlan(2, 1, 8)
    with pytest.raises(ValueError, match="outside"):
        plan.heads(Side.PREFILL, 2)
    with pytest.raises(ValueError, match="outside"):
        plan.peers(Side.DECODE, 1)
    with pytest.raises(ValueError, match="prefill and a decode side"):
        plan.heads(Side.UNSPECIFIED, 0)


def test_tensor_parallel_is_read_from_vllms_config() -> None:
    assert tensor_parallel_of(SimpleNamespace()) == TensorParallel(0, 1, 0)
    cfg = SimpleNamespace(parallel_config=SimpleNamespace(tensor_parallel_size=4, rank=6),
                          model_config=SimpleNamespace(get_total_num_kv_heads=lambda: 8))
    assert tensor_parallel_of(cfg) == TensorParallel(rank=2, size=4, total_kv_heads=8)


def _request(params):
    return SimpleNamespace(request_id="r", prompt_token_ids=list(range(40)), kv_transfer_params=params)


@pytest.mark.parametrize("bad", [0, -2, "2", 1.5, True])
def test_a_bad_prefill_tp_size_in_the_parameters_computes_the_request_locally(bad) -> None:
    sched = KvtScheduler(KvtConnectorConfig(kvtd_socket="/x", role="kv_consumer"), 16, tp_size=2)
    params = {"do_remote_prefill": True, "kvt_num_tokens": 40, "kvt_prefill_tp_size": bad}
    assert sched.get_num_new_matched_tokens(_request(params), 0) == (0, False)
    assert sched.get_num_new_matched_tokens(_request({**params, "kvt_prefill_tp_size": 4}), 0) == (40, True)


def test_the_tp_sizes_travel_in_the_requests_parameters() -> None:
    cfg = KvtConnectorConfig(kvtd_socket="/x", role="kv_producer", daemon_id="p1")
    sched = KvtScheduler(cfg, 16, tp_size=4)
    blocks = SimpleNamespace(get_block_ids=lambda: ([0, 1, 2],))
    req = _request({"do_remote_decode": True, "kvt_decode_daemon": "h:1", "kvt_decode_tp_size": 2})
    sched.update_state_after_alloc(req, blocks, 0)
    new = SimpleNamespace(req_id="r", block_ids=([0, 1, 2],), num_computed_tokens=0)
    meta = sched.build_connector_meta(SimpleNamespace(scheduled_new_reqs=[new], num_scheduled_tokens={"r": 40},
                                                      scheduled_cached_reqs=None))
    assert [s.decode_tp_size for s in meta.saves] == [2]
    req.status = SimpleNamespace(name="FINISHED_LENGTH_CAPPED")
    _, params = sched.request_finished(req, [0, 1, 2])
    assert params["kvt_prefill_tp_size"] == 4
    # A decode TP size that is not a positive integer: the request's KV is not sent (and it says why).
    bad = KvtScheduler(cfg, 16, tp_size=4)
    bad.update_state_after_alloc(_request({"do_remote_decode": True, "kvt_decode_daemon": "h:1",
                                           "kvt_decode_tp_size": "two"}), blocks, 0)
    meta = bad.build_connector_meta(SimpleNamespace(scheduled_new_reqs=[new], num_scheduled_tokens={"r": 40},
                                                    scheduled_cached_reqs=None))
    assert meta.saves == []


def test_sizes_every_shardable_combination_is_covered_and_the_rest_refused() -> None:
    assert len(SIZES) > 100
    for m, n, h in itertools.product(range(1, 9), repeat=3):
        if (m, n, h) in SIZES:
            TpPlan(m, n, h)
        else:
            with pytest.raises(ValueError):
                TpPlan(m, n, h)


def test_a_tp_size_the_models_heads_cannot_pair_with_is_caught_by_the_scheduler() -> None:
    """With the model's KV heads from vLLM the scheduler refuses a size at once, naming the parameter, instead
    of the workers failing the transfer after blocks were allocated."""
    sched = KvtScheduler(KvtConnectorConfig(kvtd_socket="/x", role="kv_consumer"), 16, tp_size=2,
                         total_kv_heads=8)
    params = {"do_remote_prefill": True, "kvt_num_tokens": 40, "kvt_prefill_tp_size": 3}
    assert sched.get_num_new_matched_tokens(_request(params), 0) == (0, False)
    _, why = sched._other_tp_size("kvt_prefill_tp_size", params, prefill=True)
    assert "kvt_prefill_tp_size 3 cannot pair" in why
    producer = KvtScheduler(KvtConnectorConfig(kvtd_socket="/x", role="kv_producer"), 16, tp_size=2,
                            total_kv_heads=8)
    _, why = producer._other_tp_size("kvt_decode_tp_size", {"kvt_decode_tp_size": 6}, prefill=False)
    assert "kvt_decode_tp_size 6 cannot pair" in why
    assert producer._other_tp_size("kvt_decode_tp_size", {"kvt_decode_tp_size": 4}, prefill=False) == (4, "")
