"""Every RPC of kvt.Client against one real kvtd: what it accepts, what it refuses and with which exception."""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable, Iterator, Tuple

import numpy as np
import pytest

import kvt
from conftest import DaemonSet, cancel_in_flight

LAYOUT = kvt.KvLayout(num_layers=2, num_blocks=8, block_tokens=16, num_kv_heads=2, head_dim=64)


@pytest.fixture
def region(client: kvt.Client, ids: Callable[[str], str]) -> Iterator[kvt.KvCache]:
    """A host cache registered under a fresh id on the daemon of `client` (its region_id)."""
    with kvt.KvCache.allocate(LAYOUT) as cache:
        cache.register(client, ids("kv"))
        yield cache
        cancel_in_flight(client)  # before the cache unregisters


def offer(client: kvt.Client, daemon: kvt.Daemon, region: kvt.KvCache, **overrides: Any) -> None:
    """An offer of one 16-token block of `region`, valid unless `overrides` break it."""
    args = dict(request_id="o", region_id=region.region_id, block_ids=[0], num_tokens=16, ready_layers=[0],
                scheme="lynx", decode_daemon=daemon.peer_address, deadline=5.0)
    args.update(overrides)
    client.offer(**args)


# --- connecting ------------------------------------------------------------------------------------------------

def test_connecting_to_a_socket_nobody_serves_raises_unavailable(sock_dir) -> None:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    with pytest.raises(kvt.Unavailable, match="no kvtd answers on .*nobody.sock"):
        kvt.Client(str(sock_dir / "nobody.sock"), connect_timeout=0.3)
    assert time.monotonic() - start < 5


def test_calls_to_a_stopped_daemon_raise_unavailable(start_daemon: Callable[..., kvt.Daemon]) -> None:
    daemon = start_daemon("both")
    with kvt.Client(daemon.socket) as client:
        client.stats()
        assert daemon.stop() == 0
        with pytest.raises(kvt.Unavailable) as caught:
            client.stats()
        assert caught.value.code.name == "UNAVAILABLE" and caught.value.message.startswith("Stats: ")
        with pytest.raises(kvt.Unavailable):
            list(client.watch("anything", timeout=2.0))


def test_calls_to_a_killed_daemon_raise_unavailable(start_daemon: Callable[..., kvt.Daemon]) -> None:
    daemon = start_daemon("both")
    with kvt.Client(daemon.socket) as client:
        daemon.kill()
        with pytest.raises(kvt.Unavailable):
            client.cancel("r")


def test_a_closed_client_refuses_calls(daemon: kvt.Daemon) -> None:
    client = kvt.Client(daemon.socket)
    client.close()
    client.close()  # idempotent
    with pytest.raises(kvt.FailedPrecondition, match="closed"):
        client.stats()


@pytest.mark.parametrize("kwargs", [dict(connect_timeout=0), dict(call_timeout=-1.0),
                                    dict(call_timeout=float("nan"))])
def test_bad_timeouts_are_invalid_arguments(daemon: kvt.Daemon, kwargs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(kvt.InvalidArgument):
        kvt.Client(daemon.socket, **kwargs)


# --- regions ---------------------------------------------------------------------------------------------------

def test_register_and_unregister_a_region(client: kvt.Client, ids: Callable[[str], str]) -> None:
    kv = ids("kv")
    regions = client.stats().regions
    with kvt.KvCache.allocate(LAYOUT) as cache:
        client.register_region(kv, LAYOUT, shm_name=cache.shm_name, size_bytes=LAYOUT.size_bytes)
        assert client.stats().regions == regions + 1
        with pytest.raises(kvt.AlreadyExists, match=kv):
            client.register_region(kv, LAYOUT, shm_name=cache.shm_name, size_bytes=LAYOUT.size_bytes)
        client.unregister_region(kv)
        assert client.stats().regions == regions
        with pytest.raises(kvt.NotFound):
            client.unregister_region(kv)


def test_kv_cache_register_and_close_unregister(client: kvt.Client, ids: Callable[[str], str]) -> None:
    regions = client.stats().regions
    cache = kvt.KvCache.allocate(LAYOUT)
    cache.register(client, ids("kv"))
    assert cache.region_id == ids("kv") and client.stats().regions == regions + 1
    with pytest.raises(kvt.FailedPrecondition, match="already registered"):
        cache.register(client, ids("kv2"))
    cache.close()
    assert client.stats().regions == regions


def test_register_an_unknown_segment_is_not_found(client: kvt.Client) -> None:
    with pytest.raises(kvt.NotFound, match="kvt-no-such-segment"):
        client.register_region("nothing", LAYOUT, shm_name="/kvt-no-such-segment", size_bytes=LAYOUT.size_bytes)


def test_register_a_layout_larger_than_the_memory_is_invalid(client: kvt.Client) -> None:
    with kvt.KvCache.allocate(LAYOUT) as cache:
        with pytest.raises(kvt.InvalidArgument, match="layout needs"):
            client.register_region("small", LAYOUT, shm_name=cache.shm_name, size_bytes=LAYOUT.size_bytes - 1)
        bigger = kvt.KvLayout(num_layers=3, num_blocks=8, block_tokens=16, num_kv_heads=2, head_dim=64)
        with pytest.raises(kvt.InvalidArgument):
            client.register_region("bigger", bigger, shm_name=cache.shm_name, size_bytes=LAYOUT.size_bytes)


@pytest.mark.parametrize("field,value", [("num_kv_heads", 2000), ("head_dim", 4096), ("block_tokens", 2048)])
def test_register_a_layout_past_the_daemons_limits_is_invalid(client: kvt.Client, field: str, value: int) -> None:
    args = dict(num_layers=1, num_blocks=1, block_tokens=1, num_kv_heads=1, head_dim=1, dtype="fp16")
    args[field] = value
    layout = kvt.KvLayout(**args)  # type: ignore[arg-type]
    with kvt.KvCache.allocate(layout) as cache:
        with pytest.raises(kvt.InvalidArgument, match=field):
            cache.register(client, "past-limits")


@pytest.mark.parametrize("region_id", ["", "bad id!", "x" * 129])
def test_register_a_bad_region_id_is_invalid(client: kvt.Client, region_id: str) -> None:
    with kvt.KvCache.allocate(LAYOUT) as cache:
        with pytest.raises(kvt.InvalidArgument, match="region_id"):
            cache.register(client, region_id)


def test_register_something_not_a_layout_is_invalid(client: kvt.Client) -> None:
    with pytest.raises(kvt.InvalidArgument, match="kvt.KvLayout"):
        client.register_region("x", {"num_layers": 2}, shm_name="/x", size_bytes=10)  # type: ignore[arg-type]


def test_register_a_gpu_region_with_a_malformed_handle_is_invalid(client: kvt.Client) -> None:
    with pytest.raises(kvt.InvalidArgument, match="64 bytes"):
        client.register_gpu_region("g", LAYOUT, ipc_handle=b"\0" * 63, size_bytes=LAYOUT.size_bytes, device=0)


def test_register_a_gpu_region_is_refused_without_a_gpu(client: kvt.Client) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: tests/test_cuda.py covers GPU regions")
    with pytest.raises(kvt.FailedPrecondition, match="GPU regions need a CUDA device"):
        client.register_gpu_region("g", LAYOUT, ipc_handle=b"\0" * 64, size_bytes=LAYOUT.size_bytes, device=0,
                                   offset_bytes=4096)


# --- offer and expect ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,match", [
    (dict(scheme="zip"), "unknown codec scheme 'zip'"),
    (dict(block_ids=[8]), "block_ids\\[0\\] is 8"),
    (dict(block_ids=[0, 0], num_tokens=32), "block"),
    (dict(block_ids=[]), "block_ids is empty"),
    (dict(num_tokens=17), "too few"),
    (dict(ready_layers=[2]), "ready layer 2"),
    (dict(decode_daemon="nohost"), "host:port"),
    (dict(deadline=0), "deadline_ms"),
    (dict(deadline=3601), "deadline_ms"),
    (dict(request_id=""), "request_id"),
])
def test_malformed_offers_are_invalid(client: kvt.Client, daemon: kvt.Daemon, region: kvt.KvCache,
                                      overrides, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(kvt.InvalidArgument, match=match) as caught:
        offer(client, daemon, region, **overrides)
    assert caught.value.message.startswith("Offer: ")


@pytest.mark.parametrize("overrides,match", [
    (dict(block_ids=[-1]), "Offer: "),
    (dict(block_ids=[1.5]), "Offer: "),
    (dict(ready_layers=["0"]), "Offer: "),
    (dict(num_tokens=-1), "Offer: "),
    (dict(deadline=float("inf")), "deadline"),
    (dict(deadline=-5), "deadline"),
])
def test_offers_protobuf_cannot_carry_are_invalid_before_any_call(client: kvt.Client, daemon: kvt.Daemon,
                                                                  region: kvt.KvCache, overrides,
                                                                  match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(kvt.InvalidArgument, match=match):
        offer(client, daemon, region, **overrides)
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        offer(client, daemon, region, **overrides)


def test_offer_of_an_unknown_region_is_not_found(client: kvt.Client, daemon: kvt.Daemon, region: kvt.KvCache) -> None:
    with pytest.raises(kvt.NotFound, match="nope"):
        offer(client, daemon, region, region_id="nope")


def test_block_ids_may_be_any_integers(client: kvt.Client, region: kvt.KvCache, ids: Callable[[str], str]) -> None:
    client.expect(ids("e"), region.region_id, np.arange(2, dtype=np.int64), 32)
    client.expect(ids("f"), region.region_id, (np.uint32(b) for b in (2, 3)), 32)
    assert sorted(r.request_id for r in client.stats(include_requests=True).requests) == [ids("e"), ids("f")]


def test_role_decides_which_side_a_daemon_serves(daemon_pair: Tuple[kvt.Daemon, kvt.Daemon]) -> None:
    prefill, decode = daemon_pair
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc:
        with pytest.raises(kvt.FailedPrecondition, match="runs as prefill"):
            pc.expect("r", "kv", [0], 16)
        with pytest.raises(kvt.FailedPrecondition, match="runs as decode"):
            dc.offer("r", "kv", [0], 16, [0], decode_daemon=prefill.peer_address)


def test_duplicate_expect_is_already_exists(client: kvt.Client, region: kvt.KvCache,
                                            ids: Callable[[str], str]) -> None:
    client.expect(ids("dup"), region.region_id, [0], 16)
    with pytest.raises(kvt.AlreadyExists, match=ids("dup")):
        client.expect(ids("dup"), region.region_id, [1], 16)


def test_stats_lists_in_flight_requests_only_when_asked(client: kvt.Client, region: kvt.KvCache,
                                                        ids: Callable[[str], str]) -> None:
    before = client.stats()
    client.expect(ids("a"), region.region_id, [0, 1], 20)
    client.expect(ids("b"), region.region_id, [2], 16)
    stats = client.stats(include_requests=True)
    assert isinstance(stats, kvt.Stats) and stats.daemon_id == "both"
    assert stats.in_flight == 2 and stats.transfers_started == before.transfers_started + 2
    assert stats.regions == before.regions
    assert sorted(r.request_id for r in stats.requests) == [ids("a"), ids("b")]
    assert all(r.side is kvt.Side.DECODE and r.num_layers == LAYOUT.num_layers for r in stats.requests)
    assert client.stats().requests == ()


# --- watch, wait_for_layer, cancel -----------------------------------------------------------------------------

def test_watch_and_wait_of_an_unknown_request_are_not_found(client: kvt.Client) -> None:
    with pytest.raises(kvt.NotFound):
        list(client.watch("ghost", timeout=5.0))
    with pytest.raises(kvt.NotFound):
        client.wait_for_layer("ghost", 0, timeout=5.0)
    with pytest.raises(kvt.NotFound):
        client.profile("ghost")


def test_wait_for_a_layer_that_never_comes_is_deadline_exceeded(client: kvt.Client, region: kvt.KvCache,
                                                                ids: Callable[[str], str]) -> None:
    slow = ids("slow")
    client.expect(slow, region.region_id, [0], 16)
    start = time.monotonic()
    with pytest.raises(kvt.DeadlineExceeded, match=f"layer 1 of request {slow} not full-ready within 0.3 s"):
        client.wait_for_layer(slow, 1, stage="full", timeout=0.3)
    assert 0.25 <= time.monotonic() - start < 5
    with pytest.raises(kvt.DeadlineExceeded, match="did not finish"):
        list(client.watch(slow, timeout=0.2))


def test_a_transfer_past_its_deadline_fails_with_deadline_exceeded(client: kvt.Client, region: kvt.KvCache,
                                                                   ids: Callable[[str], str]) -> None:
    failed = client.stats().transfers_failed
    client.expect(ids("late"), region.region_id, [0], 16, deadline=0.3)
    with pytest.raises(kvt.DeadlineExceeded, match="deadline"):
        client.wait_for_layer(ids("late"), 0, timeout=10.0)
    (event,) = client.watch(ids("late"), timeout=5.0)
    assert event.kind is kvt.EventKind.FAILED and event.terminal
    assert isinstance(event.error(), kvt.DeadlineExceeded) and event.status_code == 4
    assert client.stats().transfers_failed == failed + 1


def test_cancel_fails_watchers_with_cancelled(client: kvt.Client, region: kvt.KvCache,
                                             ids: Callable[[str], str]) -> None:
    cancelled = client.stats().transfers_cancelled
    client.expect(ids("c"), region.region_id, [0], 16)
    client.cancel(ids("c"))
    client.cancel(ids("c"))  # idempotent for a known id
    with pytest.raises(kvt.Cancelled, match="cancelled by a client"):
        client.wait_for_layer(ids("c"), 0, timeout=5.0)
    (event,) = client.watch(ids("c"), timeout=5.0, side=kvt.Side.DECODE)
    assert event.kind is kvt.EventKind.FAILED and event.status_code == 1
    assert client.stats().transfers_cancelled == cancelled + 1
    region.unregister()  # the cancelled request let go of the region


def test_cancel_of_an_unknown_request_is_not_found(client: kvt.Client) -> None:
    with pytest.raises(kvt.NotFound, match="no request \"zz\""):
        client.cancel("zz")


def test_wait_for_layer_takes_only_anchor_or_full(client: kvt.Client, region: kvt.KvCache,
                                                  ids: Callable[[str], str]) -> None:
    client.expect(ids("s"), region.region_id, [0], 16)
    with pytest.raises(kvt.InvalidArgument, match="stage"):
        client.wait_for_layer(ids("s"), 0, stage="half", timeout=1.0)
    with pytest.raises(kvt.InvalidArgument, match="timeout"):
        client.wait_for_layer(ids("s"), 0, timeout=0)


def stop_process(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOPs `pid` and returns once every one of its threads is stopped: kill() only queues the signal, and a
    thread already running may answer one more call before it stops."""
    os.kill(pid, signal.SIGSTOP)
    give_up = time.monotonic() + timeout
    while True:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # a thread that exited meanwhile
                pass
        if states and all(s in ("T", "t") for s in states):
            return
        assert time.monotonic() < give_up, f"process {pid} did not stop within {timeout} s: thread states {states}"
        time.sleep(0.001)


def test_a_hung_daemon_makes_calls_deadline_exceeded(start_daemon: Callable[..., kvt.Daemon]) -> None:
    daemon = start_daemon("both")
    with kvt.Client(daemon.socket, call_timeout=0.3) as client:
        stop_process(daemon.pid)  # connected, but nobody answers
        try:
            start = time.monotonic()
            with pytest.raises(kvt.DeadlineExceeded, match="Stats: "):
                client.stats()
            assert 0.25 <= time.monotonic() - start < 5
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
    with kvt.Client(daemon.socket) as client:  # a patient client: the daemon answers again
        assert client.stats().daemon_id == "both"


def test_requests_past_the_daemons_limit_are_resource_exhausted(module_daemons: DaemonSet,
                                                                ids: Callable[[str], str]) -> None:
    limited = module_daemons.start("both", name="limited", extra=["--max_requests=2"])
    with kvt.Client(limited.socket) as client, kvt.KvCache.allocate(LAYOUT) as cache:
        cache.register(client, ids("kv"))
        client.expect(ids("1"), ids("kv"), [0], 16)
        client.expect(ids("2"), ids("kv"), [1], 16)
        with pytest.raises(kvt.ResourceExhausted):
            client.expect(ids("3"), ids("kv"), [2], 16)
        client.cancel(ids("1"))
        client.expect(ids("3"), ids("kv"), [2], 16)  # a finished request frees its place
        cancel_in_flight(client)
