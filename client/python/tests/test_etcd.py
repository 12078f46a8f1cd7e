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
from typing import Iterator

import numpy as np
import pytest

import kvt
from conftest import BASE_FLAGS, cancel_in_flight
from kv_reference import fill_random, gather

ETCD = shutil.which("etcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="no etcd binary (Debian's etcd-server; ./kvt test installs it)")
LAYOUT = kvt.KvLayout(num_layers=2, num_blocks=8, block_tokens=16, num_kv_heads=2, head_dim=32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[str]:
    client, peer = free_port(), free_port()
    c, p = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    with open(tmp_path / "etcd.log", "w") as log:
        proc = subprocess.Popen([ETCD, "--name", "t", "--data-dir", str(tmp_path / "etcd"), "--listen-client-urls", c,
                                 "--advertise-client-urls", c, "--listen-peer-urls", p,
                                 "--initial-advertise-peer-urls", p, "--initial-cluster", f"t={p}"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while b"ready to serve client requests" not in (tmp_path / "etcd.log").read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "etcd.log").read_text()
            time.sleep(0.05)
        yield f"127.0.0.1:{client}"
    finally:
        proc.kill()
        proc.wait()


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
                          ("--etcd_endpoints=https://e:2379", "TLS to etcd")):
        with pytest.raises(kvt.Unavailable, match="exited"):
            kvt.Daemon.start(kvtd_path, role="decode", work_dir=str(tmp_path), name="bad",
                             extra_flags=BASE_FLAGS + ["--etcd_endpoints=127.0.0.1:1", flag], start_timeout=10)
        assert message in (tmp_path / "bad.log").read_text()
