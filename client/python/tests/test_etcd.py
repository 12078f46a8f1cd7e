"""Daemons that find each other through a real etcd (kvtd --etcd_endpoints; Debian's etcd-server): an Offer
names its decode daemon by id, `kvtctl peers` lists what etcd knows, and a killed daemon's id stops resolving
when its lease expires."""
from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest

import kvt
from conftest import BASE_FLAGS, cancel_in_flight
from kv_reference import expected_after_transfer, fill_random, gather

ETCD = shutil.which("etcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="no etcd binary (Debian's etcd-server; ./kvt test installs it)")
LAYOUT = kvt.KvLayout(num_layers=2, num_blocks=8, block_tokens=16, num_kv_heads=2, head_dim=32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """One etcd member on loopback ports; kill() and start() again keep its data (leases and keys survive)."""

    def __init__(self, work: Path) -> None:
        self.work, self.client, self.peer = work, free_port(), free_port()
        self.proc: Optional[subprocess.Popen] = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client}"

    def start(self) -> None:
        c, p = f"http://127.0.0.1:{self.client}", f"http://127.0.0.1:{self.peer}"
        log_path = self.work / "etcd.log"
        start = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "a") as log:
            self.proc = subprocess.Popen(
                [ETCD, "--name", "t", "--data-dir", str(self.work / "etcd"), "--listen-client-urls", c,
                 "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                 "--initial-cluster", f"t={p}"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while b"ready to serve client requests" not in log_path.read_bytes()[start:]:
            assert self.proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[Etcd]:
    server = Etcd(tmp_path)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def etcd(etcd_server: Etcd) -> str:
    return etcd_server.endpoint


def test_offer_names_its_decode_daemon_by_id_and_a_killed_one_stops_resolving(
        etcd, start_daemon, kvtctl_path) -> None:  # type: ignore[no-untyped-def]
    flags = [f"--etcd_endpoints={etcd}", "--etcd_prefix=/kvt-py", "--etcd_ttl_s=2"]
    prefill = start_daemon("prefill", name="prefill-7", extra=flags)
    decode = start_daemon("decode", name="decode-7", extra=flags)

    listed = subprocess.run([kvtctl_path, "peers", "--etcd", etcd, "--prefix", "/kvt-py", "--json"], check=True,
                            capture_output=True, text=True)
    peers = {d["daemon_id"]: d for d in json.loads(listed.stdout)["daemons"]}
    assert set(peers) == {"prefill-7", "decode-7"}
    assert peers["decode-7"]["peer_address"] == decode.peer_address and peers["decode-7"]["role"] == "decode"
    table = subprocess.run([kvtctl_path, "peers", "--etcd", etcd, "--prefix", "/kvt-py"], check=True,
                           capture_output=True, text=True).stdout
    assert "decode-7" in table and decode.peer_address in table

    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc, \
            kvt.KvCache.allocate(LAYOUT) as src, kvt.KvCache.allocate(LAYOUT) as dst:
        fill_random(src, seed=3)
        src.register(pc, "src")
        dst.register(dc, "dst")
        dc.expect("by-id", "dst", range(4), 60, source_daemon="prefill-7")
        pc.offer("by-id", "src", range(4), 60, ready_layers=[0, 1], scheme="bf16", decode_daemon="decode-7")
        events = list(dc.watch("by-id", timeout=20))
        assert events[-1].kind is kvt.EventKind.DONE, events[-1]
        np.testing.assert_array_equal(gather(dst, range(4), 60), gather(src, range(4), 60))
        with pytest.raises(kvt.NotFound, match="no daemon \"decode-8\" is registered"):
            pc.offer("nobody", "src", range(4), 60, ready_layers=[0], decode_daemon="decode-8")
        for r in ("by-id",):
            list(pc.watch(r, timeout=20))
        dst.unregister()

        decode.kill()  # kill -9: nobody revokes its lease; it lasts 2 s
        killed = time.monotonic()
        deadline = killed + 10
        for attempt in itertools.count():
            try:
                pc.offer(f"after-kill-{attempt}", "src", range(4), 60, ready_layers=[0], decode_daemon="decode-7",
                         deadline=2)
            except kvt.NotFound:
                assert time.monotonic() - killed > 0.5, "gone at once: that was a revoke, not the lease"
                break
            except kvt.KvtError:
                pass  # resolved to the dead daemon's address: the offer fails on its own
            assert time.monotonic() < deadline, "decode-7 still resolves 10 s after it was killed"
            time.sleep(0.2)
        cancel_in_flight(pc)  # the offers that resolved to the dead daemon; they end, then src can go
        settle = time.monotonic() + 10
        while pc.stats().in_flight and time.monotonic() < settle:
            time.sleep(0.05)


def test_a_daemon_id_without_etcd_is_refused_with_what_to_do(start_daemon) -> None:  # type: ignore[no-untyped-def]
    prefill = start_daemon("prefill")
    with kvt.Client(prefill.socket) as pc, kvt.KvCache.allocate(LAYOUT) as src:
        src.register(pc, "src")
        with pytest.raises(kvt.InvalidArgument, match="--etcd_endpoints"):
            pc.offer("r", "src", range(4), 60, ready_layers=[0], decode_daemon="decode-0")


def test_bad_etcd_flags_stop_kvtd_at_start(kvtd_path, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for flag, message in (("--etcd_prefix=kvt", "--etcd_prefix must start"), ("--etcd_ttl_s=1", "--etcd_ttl_s"),
                          ("--etcd_endpoints=https://e:2379", "give the CA")):
        with pytest.raises(kvt.Unavailable, match="exited"):
            kvt.Daemon.start(kvtd_path, role="decode", work_dir=str(tmp_path), name="bad",
                             extra_flags=BASE_FLAGS + ["--etcd_endpoints=127.0.0.1:1", flag], start_timeout=10)
        assert message in (tmp_path / "bad.log").read_text()


SCHEMES = ("bf16", "int8", "lynx", "int4")
CLUSTER_LAYOUT = kvt.KvLayout(num_layers=2, num_blocks=64, block_tokens=16, num_kv_heads=2, head_dim=32)


def test_two_by_two_daemons_through_etcd_restart_and_a_killed_decode_daemon(
        etcd_server, start_daemon, kvtctl_path, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """2 prefill and 2 decode daemons (separate processes) moving requests in every direction at once, mixed
    schemes, named by id through etcd: etcd killed mid-run (running transfers go on, cached ids keep resolving),
    restarted (new daemons resolve again), then a decode daemon killed (its id stops resolving, the rest go on)."""
    flags = [f"--etcd_endpoints={etcd_server.endpoint}", "--etcd_prefix=/kvt-2x2", "--etcd_ttl_s=2"]
    prefills = [start_daemon("prefill", name=f"p{i}", extra=flags) for i in range(2)]
    decodes = [start_daemon("decode", name=f"d{i}", extra=flags) for i in range(2)]
    pcs = [kvt.Client(d.socket) for d in prefills]
    dcs = [kvt.Client(d.socket) for d in decodes]
    srcs = [kvt.KvCache.allocate(CLUSTER_LAYOUT) for _ in prefills]
    dsts = [kvt.KvCache.allocate(CLUSTER_LAYOUT) for _ in decodes]
    try:
        for i, (client, cache) in enumerate(zip(pcs, srcs)):
            fill_random(cache, seed=10 + i)
            cache.register(client, "src")
        for client, cache in zip(dcs, dsts):
            cache.register(client, "dst")
        expected: Dict[Tuple[int, str], np.ndarray] = {}
        for p, cache in enumerate(srcs):
            for scheme in SCHEMES:
                expected[(p, scheme)] = expected_after_transfer(kvtctl_path, scheme, gather(cache, range(4), 60),
                                                                kvt.DType.BF16, tmp_path)

        def wave(name: str, decode_ids: List[int]) -> List[Tuple[str, int, int, str, range]]:
            """Every prefill daemon offers one request of each scheme to each decode daemon in `decode_ids`."""
            started = []
            slot = {d: 0 for d in decode_ids}
            for p in range(2):
                for d in decode_ids:
                    for scheme in SCHEMES:
                        rid = f"{name}-p{p}-d{d}-{scheme}"
                        blocks = range(4 * slot[d], 4 * slot[d] + 4)
                        slot[d] += 1
                        dcs[d].expect(rid, "dst", blocks, 60, source_daemon=f"p{p}", deadline=30)
                        pcs[p].offer(rid, "src", range(4), 60, ready_layers=[0, 1], scheme=scheme,
                                     decode_daemon=f"d{d}", deadline=30)
                        started.append((rid, p, d, scheme, blocks))
            return started

        def check(started: List[Tuple[str, int, int, str, range]]) -> None:
            for rid, p, d, scheme, blocks in started:
                events = list(dcs[d].watch(rid, timeout=30))
                assert events[-1].kind is kvt.EventKind.DONE, (rid, events[-1])
                np.testing.assert_array_equal(gather(dsts[d], blocks, 60), expected[(p, scheme)], err_msg=rid)
                list(pcs[p].watch(rid, timeout=30))

        first = wave("w1", [0, 1])  # 16 requests in flight across the four daemons
        etcd_server.kill()
        check(first)  # running transfers never touch etcd
        check(wave("w2", [0, 1]))  # etcd is down: the ids resolve from each daemon's cache
        etcd_server.start()
        late = start_daemon("decode", name="d-late", extra=flags)
        deadline = time.monotonic() + 10
        while True:  # a daemon that registered after the restart resolves once the watches are back
            try:
                pcs[0].offer("probe-late", "src", range(4), 60, ready_layers=[0], decode_daemon="d-late", deadline=2)
                break
            except (kvt.NotFound, kvt.Unavailable):
                assert time.monotonic() < deadline, "d-late never resolved after etcd came back"
                time.sleep(0.1)
        assert late.peer_address in subprocess.run(
            [kvtctl_path, "peers", "--etcd", etcd_server.endpoint, "--prefix", "/kvt-2x2"], check=True,
            capture_output=True, text=True).stdout
        check(wave("w3", [0, 1]))

        decodes[1].kill()
        killed = time.monotonic()
        while True:  # its lease (2 s) runs out; offers to it then fail at once
            try:
                pcs[1].offer(f"to-dead-{time.monotonic_ns()}", "src", range(4), 60, ready_layers=[0],
                             decode_daemon="d1", deadline=2)
            except kvt.NotFound:
                break
            assert time.monotonic() - killed < 10, "d1 still resolves 10 s after it was killed"
            time.sleep(0.2)
        check(wave("w4", [0]))  # the rest go on
    finally:
        for client in pcs + dcs[:1]:
            cancel_in_flight(client)
        for client in pcs:
            settle = time.monotonic() + 10
            while client.stats().in_flight and time.monotonic() < settle:
                time.sleep(0.05)
        for cache in srcs + dsts:  # d1's is gone with its daemon (Unavailable counts as unregistered)
            cache.close()
        for client in pcs + dcs:
            client.close()
