"""KvtConnector (kvt.vllm) driven in vLLM's call order by tests/vllm_fake.py, against real kvtd processes: the
prefill instance in its own process, the decode instance in this one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kvt  # noqa: E402
from kvt.vllm import KvtConnectorConfig  # noqa: E402
from kvt.vllm.binding import layer_order, layout_of  # noqa: E402
from kv_reference import expected_after_transfer  # noqa: E402
from vllm_fake import FakeEngine  # noqa: E402

SHAPE = {"layers": 3, "blocks": 32, "block_size": 16, "heads": 2, "head_dim": 64}


def as_bf16(values: np.ndarray) -> np.ndarray:
    return torch.from_numpy(values).to(torch.bfloat16).float().numpy()


def run_prefill(prefill: kvt.Daemon, decode: kvt.Daemon, requests: List[Dict[str, Any]], scheme: str,
                extra: Dict[str, Any] = None, shape: Dict[str, Any] = None,  # type: ignore[assignment]
                decode_tp_size: int = 0) -> subprocess.Popen:
    config = {"extra": {"kvtd_socket": prefill.socket, "scheme": scheme, "daemon_id": prefill.daemon_id,
                        "deadline_s": 20, **(extra or {})},
              "decode_daemon": decode.peer_address, "shape": shape or SHAPE, "requests": requests, "timeout": 30}
    if decode_tp_size:
        config["decode_tp_size"] = decode_tp_size
    here = Path(__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), str(Path(kvt.__file__).parent.parent),
                                                        os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(here / "vllm_fake.py"), json.dumps(config)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_params(proc: subprocess.Popen, count: int) -> Dict[str, Dict[str, Any]]:
    out = {}
    while len(out) < count:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the prefill process ended early: {proc.stderr.read()}")
        item = json.loads(line)
        assert item["delay"] is True, "a sent request's blocks must stay until the send finishes"
        out[item["id"]] = item["params"]
    return out


def decode_engine(decode: kvt.Daemon, mode: str = "full", **shape: Any) -> FakeEngine:
    return FakeEngine("kv_consumer", {"kvtd_socket": decode.socket, "mode": mode, "deadline_s": 20},
                      **{**SHAPE, **shape})


@pytest.mark.parametrize("scheme", ["bf16", "lynx"])
def test_prefill_process_to_decode_lands_what_the_codec_decodes(daemon_pair, ids, kvtctl_path, tmp_path,
                                                                scheme) -> None:  # type: ignore[no-untyped-def]
    prefill, decode = daemon_pair
    requests = [{"id": ids(f"vllm{s}"), "tokens": t, "seed": s, "out": str(tmp_path / f"r{s}.npy")}
                for s, t in ((1, 100), (2, 37))]
    proc = run_prefill(prefill, decode, requests, scheme)
    engine = decode_engine(decode)
    try:
        params = read_params(proc, len(requests))
        started = {}
        for req in requests:
            p = params[req["id"]]
            assert p["do_remote_prefill"] is True and p["kvt_num_tokens"] == req["tokens"]
            assert p["kvt_source_daemon"] == prefill.daemon_id
            started[req["id"]] = engine.start_decode(req["id"], req["tokens"], p)
        engine.run_until(lambda: set(started) <= engine.received, timeout=30)
        assert engine.worker.get_block_ids_with_load_errors() == set()
        for req in requests:
            _, block_ids = started[req["id"]]
            got = engine.gather(block_ids, req["tokens"])
            source = as_bf16(np.load(req["out"]))  # what the prefill instance's bf16 blocks hold
            want = expected_after_transfer(kvtctl_path, scheme, source, kvt.DType.BF16, tmp_path)
            np.testing.assert_array_equal(got, want)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert all(f"sent {r['id']}" in out for r in requests), out
    finally:
        engine.shutdown()
        if proc.poll() is None:
            proc.kill()


def test_anchor_mode_hands_the_request_back_at_the_anchor(daemon_pair, ids, kvtctl_path,
                                                         tmp_path) -> None:  # type: ignore[no-untyped-def]
    prefill, decode = daemon_pair
    req = {"id": ids("vllm"), "tokens": 64, "seed": 3, "out": str(tmp_path / "a.npy")}
    proc = run_prefill(prefill, decode, [req], "lynx")
    engine = decode_engine(decode, mode="anchor")
    try:
        params = read_params(proc, 1)
        request, block_ids = engine.start_decode(req["id"], req["tokens"], params[req["id"]])
        engine.run_until(lambda: req["id"] in engine.received, timeout=30)
        # Finished early (say one token): the residual may still be landing, so vLLM must keep the blocks until
        # the connector reports the transfer over.
        request.status.name = "FINISHED_STOPPED"
        assert engine.sched.request_finished(request, block_ids) == (True, None)
        engine.run_until(lambda: req["id"] in engine.sending, timeout=30, finished={req["id"]})
        proc.communicate(timeout=60)  # the prefill side finishes only when every layer is DONE on both sides
        want = expected_after_transfer(kvtctl_path, "lynx", as_bf16(np.load(req["out"])), kvt.DType.BF16, tmp_path)
        deadline = time.monotonic() + 10  # the residual lands in place after the hand-back
        while not np.array_equal(engine.gather(block_ids, req["tokens"]), want) and time.monotonic() < deadline:
            time.sleep(0.05)
        np.testing.assert_array_equal(engine.gather(block_ids, req["tokens"]), want)
    finally:
        engine.shutdown()
        if proc.poll() is None:
            proc.kill()


def test_killed_prefill_daemon_reports_load_errors_for_the_blocks(start_daemon, ids) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    engine = decode_engine(decode)
    try:
        rid = ids("vllm")
        # The decode instance expects a transfer the prefill instance never sends: its kvtd is killed.
        request, block_ids = engine.start_decode(rid, 40, {"do_remote_prefill": True, "kvt_transfer_id": rid,
                                                           "kvt_source_daemon": prefill.daemon_id})
        engine.step(engine_output())
        prefill.kill()
        with pytest.raises(TimeoutError):  # nothing arrives; the deadline (20 s) is what ends it
            engine.run_until(lambda: rid in engine.received, timeout=2)
        # Aborting it cancels the transfer; vLLM frees the blocks once the connector reports them.
        request.status.name = "FINISHED_ABORTED"
        delay, params = engine.sched.request_finished(request, block_ids)
        assert (delay, params) == (True, None)
        engine.run_until(lambda: rid in engine.sending, timeout=20, finished={rid})
        assert rid in engine.received  # the load is over, failed: its blocks are reported as not loaded
        assert engine.worker.get_block_ids_with_load_errors() == set(block_ids)
    finally:
        engine.shutdown()


def test_decode_daemon_gone_ends_the_send_and_frees_the_blocks(start_daemon, ids, tmp_path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    decode.kill()  # the decode instance's kvtd is gone before anything is sent
    req = {"id": ids("vllm"), "tokens": 20, "seed": 5, "out": str(tmp_path / "k.npy")}
    proc = run_prefill(prefill, decode, [req], "int8", extra={"deadline_s": 3})
    try:
        read_params(proc, 1)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f"sent {req['id']}" in out  # reported as finished (failed), so vLLM frees its blocks
    finally:
        if proc.poll() is None:
            proc.kill()


def test_offers_the_daemon_refuses_end_the_send_and_free_the_blocks(daemon_pair, ids,
                                                                   tmp_path) -> None:  # type: ignore[no-untyped-def]
    prefill, decode = daemon_pair
    req = {"id": ids("vllm"), "tokens": 20, "seed": 6, "out": str(tmp_path / "s.npy")}
    proc = run_prefill(prefill, decode, [req], "lynx-a9r9")  # kvtd refuses the scheme on every layer's Offer
    try:
        read_params(proc, 1)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f"sent {req['id']}" in out  # counted as over (failed), so vLLM frees its blocks
        assert "InvalidArgument" in err or "INVALID_ARGUMENT" in err
    finally:
        if proc.poll() is None:
            proc.kill()


def engine_output():  # type: ignore[no-untyped-def]
    from vllm_fake import SchedulerOutput
    return SchedulerOutput()


def test_local_prefix_hit_is_computed_locally(daemon_pair) -> None:  # type: ignore[no-untyped-def]
    _, decode = daemon_pair
    engine = decode_engine(decode)
    try:
        from vllm_fake import Request
        request = Request("r", list(range(64)), {"do_remote_prefill": True, "kvt_transfer_id": "x"})
        assert engine.sched.get_num_new_matched_tokens(request, 16) == (0, False)
        bad = Request("r2", list(range(64)), {"do_remote_prefill": True, "kvt_num_tokens": 65})
        assert engine.sched.get_num_new_matched_tokens(bad, 0) == (0, False)
        plain = Request("r3", list(range(64)), None)
        assert engine.sched.get_num_new_matched_tokens(plain, 0) == (0, False)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("extra, message", [
    ({}, "kvtd_socket is required"),
    ({"kvtd_socket": "/x", "mode": "half"}, "mode must be"),
    ({"kvtd_socket": "/x", "deadline_s": 0}, "deadline_s must be a positive"),
    ({"kvtd_socket": "/x", "deadline_s": float("nan")}, "deadline_s must be a positive"),
    ({"kvtd_socket": "/x", "sheme": "lynx"}, "unknown key(s) sheme"),
    ({"kvtd_socket": "/x", "scheme": ""}, "scheme must be a codec name"),
])
def test_bad_config_is_refused_with_what_to_fix(extra, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        KvtConnectorConfig.from_extra_config("kv_consumer", extra)


def test_bad_role_and_unreachable_daemon_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from vllm_fake import KVTransferConfig
    with pytest.raises(ValueError, match="kv_role must be one of"):
        KvtConnectorConfig.from_kv_transfer_config(KVTransferConfig("kv_both_ways", {"kvtd_socket": "/x"}))
    with pytest.raises(kvt.Unavailable):
        FakeEngine("kv_consumer", {"kvtd_socket": str(tmp_path / "none.sock"), "connect_timeout_s": 0.5})


def test_layer_names_and_tensor_layouts() -> None:
    assert layer_order(["model.layers.10.attn", "model.layers.2.attn", "lm"]) == \
        ["model.layers.2.attn", "model.layers.10.attn", "lm"]
    with pytest.raises(ValueError, match="same number"):
        layer_order(["a.1.x", "b.1.y"])
    nhd = torch.zeros(2, 4, 16, 2, 8, dtype=torch.float16)
    assert layout_of(nhd).order is kvt.BlockOrder.NHD
    assert layout_of(nhd).kv_stride_bytes == nhd[1].data_ptr() - nhd[0].data_ptr()  # V follows K
    hnd = torch.zeros(2, 4, 2, 16, 8, dtype=torch.bfloat16).permute(0, 1, 3, 2, 4)
    assert layout_of(hnd).order is kvt.BlockOrder.HND and layout_of(hnd).block_tokens == 16
    with pytest.raises(ValueError, match=r"shape \[2, num_blocks"):
        layout_of(torch.zeros(4, 2, 16, 2, 8))
    with pytest.raises(ValueError, match="neither NHD nor HND"):
        layout_of(torch.zeros(2, 16, 4, 2, 8).permute(0, 2, 1, 3, 4))
    with pytest.raises(ValueError, match="bf16, fp16 or fp32"):
        layout_of(torch.zeros(2, 4, 16, 2, 8, dtype=torch.int8))


def test_hnd_caches_move_like_nhd(daemon_pair, ids, tmp_path) -> None:  # type: ignore[no-untyped-def]
    prefill, decode = daemon_pair
    req = {"id": ids("vllm"), "tokens": 33, "seed": 9, "out": str(tmp_path / "h.npy")}
    proc = run_prefill(prefill, decode, [req], "bf16")
    engine = decode_engine(decode, order="HND")
    try:
        params = read_params(proc, 1)
        _, block_ids = engine.start_decode(req["id"], req["tokens"], params[req["id"]])
        engine.run_until(lambda: req["id"] in engine.received, timeout=30)
        np.testing.assert_array_equal(engine.gather(block_ids, req["tokens"]), as_bf16(np.load(req["out"])))
        proc.communicate(timeout=60)
    finally:
        engine.shutdown()
        if proc.poll() is None:
            proc.kill()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("scheme", ["bf16", "lynx", "int4"])
def test_cuda_caches_move_in_place_as_the_codec_decodes(start_daemon, ids, kvtctl_path, tmp_path,
                                                       scheme) -> None:  # type: ignore[no-untyped-def]
    """vLLM's caches on the GPU, registered through CUDA IPC: the daemons read the prefill blocks and write the
    decode blocks in place. With $KVT_VLLM_KV ([L, 2, T, H, D], the reference engine's --dump-kv), real KV."""
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    kv_file = os.environ.get("KVT_VLLM_KV")
    if kv_file:
        layers, _, tokens, heads, head_dim = np.load(kv_file, mmap_mode="r").shape
        tokens = min(tokens, 1000)  # not a whole number of blocks or chunks: the tail is exercised
    else:
        layers, tokens, heads, head_dim = 3, 300, 2, 64
    shape = {"layers": layers, "blocks": -(-tokens // 16) + 4, "block_size": 16, "heads": heads,
             "head_dim": head_dim, "device": "cuda:0"}
    req = {"id": ids(f"cuda-{scheme}"), "tokens": tokens, "seed": 11, "out": str(tmp_path / "c.npy")}
    if kv_file:
        req["kv"] = kv_file
    try:
        proc = run_prefill(prefill, decode, [req], scheme, shape=shape)
        engine = FakeEngine("kv_consumer", {"kvtd_socket": decode.socket, "deadline_s": 20}, **shape)
    except kvt.FailedPrecondition as e:
        pytest.skip(f"this kvtd has no GPU path: {e}")
    try:
        params = read_params(proc, 1)
        _, block_ids = engine.start_decode(req["id"], req["tokens"], params[req["id"]])
        engine.run_until(lambda: req["id"] in engine.received, timeout=60)
        assert engine.worker.get_block_ids_with_load_errors() == set()
        want = expected_after_transfer(kvtctl_path, scheme, as_bf16(np.load(req["out"])), kvt.DType.BF16, tmp_path)
        np.testing.assert_array_equal(engine.gather(block_ids, req["tokens"]), want)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and f"sent {req['id']}" in out, err
    finally:
        engine.shutdown()
        if proc.poll() is None:
            proc.kill()


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=CUDA)])
@pytest.mark.parametrize("prefill_tp,decode_tp,heads", [(2, 1, 4), (1, 2, 4), (4, 2, 4), (4, 1, 2), (1, 4, 2)])
def test_instances_of_different_tensor_parallel_sizes_exchange_every_head(start_daemon, ids, tmp_path, prefill_tp,
                                                                          decode_tp, heads, device) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """Each prefill rank offers to the decode ranks that hold its heads, each decode rank expects from the prefill
    ranks that hold its heads (kvt/vllm/tp.py; with more ranks than heads, vLLM's replicas), and kvtd re-slices:
    every decode rank holds its heads of the prompt, bit for bit in bf16; host caches, and GPU caches through CUDA
    IPC. Afterwards no worker still tracks the transfer."""
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    rid = ids(f"tp{prefill_tp}to{decode_tp}h{heads}")
    requests = [{"id": rid, "tokens": 45, "seed": 11, "out": str(tmp_path / "tp.npy")}]
    shape = {**SHAPE, "heads": heads, "device": device}
    proc = run_prefill(prefill, decode, requests, "bf16", shape={**shape, "tp_size": prefill_tp},
                       decode_tp_size=decode_tp)
    engine = None
    try:
        try:
            engine = FakeEngine("kv_consumer", {"kvtd_socket": decode.socket, "deadline_s": 20},
                                **{**shape, "tp_size": decode_tp})
        except kvt.FailedPrecondition as e:
            pytest.skip(f"this kvtd has no GPU path: {e}")
        p = read_params(proc, 1)[rid]
        assert p["kvt_prefill_tp_size"] == prefill_tp
        _, block_ids = engine.start_decode(rid, 45, p)
        engine.run_until(lambda: rid in engine.received, timeout=30)
        assert engine.load_errors() == set()
        want = as_bf16(np.load(requests[0]["out"]))
        np.testing.assert_array_equal(engine.gather(block_ids, 45), want)
        for rank in range(decode_tp):  # replicas too: every rank holds its heads
            begin, got = engine.head_begin[rank], engine.gather_rank(rank, block_ids, 45)
            np.testing.assert_array_equal(got, want[:, :, :, begin:begin + engine.rank_heads])
        end = time.monotonic() + 5
        while any(w._worker._ids for w in engine.workers) and time.monotonic() < end:
            time.sleep(0.01)
        assert not any(w._worker._ids for w in engine.workers)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if engine is not None:
            engine.shutdown()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_a_copy_error_after_the_transfer_reports_load_errors_not_a_hang(daemon_pair, ids, tmp_path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """A host mirror whose copy into vLLM's tensor raises: the request is still reported received, with its blocks
    as load errors (vLLM recomputes them), and the worker forgets the transfer."""
    prefill, decode = daemon_pair
    rid = ids("copyfail")
    requests = [{"id": rid, "tokens": 40, "seed": 5, "out": str(tmp_path / "c.npy")}]
    proc = run_prefill(prefill, decode, requests, "bf16")
    engine = decode_engine(decode)
    try:
        def fail(*_args: Any) -> None:
            raise RuntimeError("copy failed (test)")

        for binding in engine.worker._worker._layers:
            binding.stage_in = fail
        p = read_params(proc, 1)[rid]
        _, block_ids = engine.start_decode(rid, 40, p)
        engine.run_until(lambda: rid in engine.received, timeout=30)
        assert engine.load_errors() == set(block_ids)
        assert not engine.worker._worker._ids
    finally:
        engine.shutdown()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
