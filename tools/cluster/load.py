#!/usr/bin/env python3
"""Load on a 2 x 2 cluster found through etcd (issue 38): rounds of concurrent requests from 2 prefill to 2 decode
kvtd in mixed schemes, every request named by daemon id; failures, time to anchor and to full per scheme
(p50/p99), and each daemon's RSS and open files after every round.

    python3 tools/cluster/load.py --kvtd bazel-bin/server/kvtd --rounds 100 --concurrency 64 [--json]

Needs the kvt Python client on PYTHONPATH (client/python, stubs generated) and Debian's etcd (started here on
loopback ports). Prints progress to stderr, a table (or --json) to stdout.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

import kvt


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(work: Path) -> Tuple[subprocess.Popen, str]:
    etcd = shutil.which("etcd")
    if etcd is None:
        sys.exit("error: no etcd binary; install Debian's etcd-server")
    client, peer = free_port(), free_port()
    c, p = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log = work / "etcd.log"
    proc = subprocess.Popen([etcd, "--name", "load", "--data-dir", str(work / "etcd"), "--listen-client-urls", c,
                             "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls",
                             p, "--initial-cluster", f"load={p}"], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while b"ready to serve client requests" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"error: etcd did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, f"127.0.0.1:{client}"


def usage(pid: int) -> Tuple[int, int]:
    """(RSS in bytes, open file descriptors) of a process."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def percentile(values: List[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvtd", required=True)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--schemes", default="bf16,int8,lynx,int4")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rate-gbps", type=float, default=0.0, help="per-link rate limit of every daemon (0: none)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    schemes = args.schemes.split(",")
    blocks_per_request = -(-args.tokens // 16)
    layout = kvt.KvLayout(num_layers=args.layers, num_blocks=blocks_per_request * args.concurrency, block_tokens=16,
                          num_kv_heads=2, head_dim=64)
    work = Path(tempfile.mkdtemp(prefix="kvt-load-"))
    etcd, endpoint = start_etcd(work)
    flags = ["--ucx_net_devices=lo", "--codec_threads=1", "--log_level=warn", f"--etcd_endpoints={endpoint}",
             "--etcd_prefix=/kvt-load"]
    daemons: List[kvt.Daemon] = []
    try:
        for role, name in (("prefill", "p0"), ("prefill", "p1"), ("decode", "d0"), ("decode", "d1")):
            daemons.append(kvt.Daemon.start(args.kvtd, role=role, name=name, work_dir=str(work),
                                            rate_gbps=args.rate_gbps, extra_flags=flags))
        clients = [kvt.Client(d.socket) for d in daemons]
        caches = [kvt.KvCache.allocate(layout) for _ in daemons]
        rng = np.random.default_rng(1)
        for i, (client, cache) in enumerate(zip(clients, caches)):
            if i < 2:  # the prefill caches hold random bf16 KV
                for layer in range(args.layers):
                    for view in (cache.k_numpy(layer), cache.v_numpy(layer)):
                        view[:] = (rng.standard_normal(view.shape).astype(np.float32).view(np.uint32) >> 16)
            cache.register(client, "kv")
        anchor_ms: Dict[str, List[float]] = {s: [] for s in schemes}
        full_ms: Dict[str, List[float]] = {s: [] for s in schemes}
        failures: List[str] = []
        usage_rounds: List[Dict[str, Tuple[int, int]]] = []
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency)

        warm = min(10, args.rounds - 1)  # rounds before this one are warm-up: links and pools being set up

        def follow(rid: str, decode: kvt.Client, scheme: str, round_index: int) -> None:
            anchors: Dict[int, int] = {}  # per layer: its first usable event (ANCHOR_READY, or FULL_READY)
            fulls: Dict[int, int] = {}
            for event in decode.watch(rid, timeout=120):
                if event.kind in (kvt.EventKind.ANCHOR_READY, kvt.EventKind.FULL_READY):
                    anchors.setdefault(event.layer, event.at_us)
                if event.kind is kvt.EventKind.FULL_READY:
                    fulls[event.layer] = event.at_us
                if event.kind is kvt.EventKind.FAILED:
                    failures.append(f"{rid}: {event.error()}")
                    return
            if round_index >= warm:
                anchor_ms[scheme].append(max(anchors.values()) / 1000.0)
                full_ms[scheme].append(max(fulls.values()) / 1000.0)

        started = time.monotonic()
        for r in range(args.rounds):
            futures = []
            for i in range(args.concurrency):
                p, d, scheme = i % 2, 2 + (i // 2) % 2, schemes[i % len(schemes)]
                rid = f"r{r}-{i}"
                blocks = range(i * blocks_per_request, (i + 1) * blocks_per_request)
                clients[d].expect(rid, "kv", blocks, args.tokens, source_daemon=f"p{p}", deadline=120)
                clients[p].offer(rid, "kv", range(blocks_per_request), args.tokens,
                                 ready_layers=range(args.layers), scheme=scheme, decode_daemon=f"d{d - 2}",
                                 deadline=120)
                futures.append(pool.submit(follow, rid, clients[d], scheme, r))
            for f in futures:
                f.result()
            for i in range(args.concurrency):  # the prefill side ends when the decode side acknowledged all
                list(clients[i % 2].watch(f"r{r}-{i}", timeout=120))
            usage_rounds.append({d.daemon_id: usage(d.pid) for d in daemons})
            print(f"round {r + 1}/{args.rounds}: {len(failures)} failures, {time.monotonic() - started:.1f} s",
                  file=sys.stderr, flush=True)
        result = {
            "rounds": args.rounds, "concurrency": args.concurrency, "tokens": args.tokens, "layers": args.layers,
            "rate_gbps": args.rate_gbps, "requests": args.rounds * args.concurrency, "failures": len(failures),
            "warmup_rounds": warm,
            "failure_examples": failures[:5], "seconds": round(time.monotonic() - started, 1),
            "per_scheme": {s: {"anchor_p50_ms": percentile(anchor_ms[s], 50), "anchor_p99_ms": percentile(anchor_ms[s], 99),
                               "full_p50_ms": percentile(full_ms[s], 50), "full_p99_ms": percentile(full_ms[s], 99),
                               "n": len(full_ms[s])} for s in schemes},
            "daemons": {d.daemon_id: {
                "rss_mib_after_warmup": usage_rounds[warm][d.daemon_id][0] / 2**20,
                "rss_mib_last": usage_rounds[-1][d.daemon_id][0] / 2**20,
                "rss_mib_peak": max(u[d.daemon_id][0] for u in usage_rounds) / 2**20,
                "fds_after_warmup": usage_rounds[warm][d.daemon_id][1], "fds_last": usage_rounds[-1][d.daemon_id][1],
                "fds_peak": max(u[d.daemon_id][1] for u in usage_rounds)} for d in daemons},
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"{result['requests']} requests in {result['seconds']} s, {result['failures']} failures")
            print(f"after {warm} warm-up rounds:")
            print(f"{'scheme':8} {'anchor p50':>11} {'anchor p99':>11} {'full p50':>9} {'full p99':>9}  (ms)")
            for s, v in result["per_scheme"].items():
                print(f"{s:8} {v['anchor_p50_ms']:11.1f} {v['anchor_p99_ms']:11.1f} {v['full_p50_ms']:9.1f} "
                      f"{v['full_p99_ms']:9.1f}")
            print(f"{'daemon':8} {'RSS MiB warm':>12} {'last':>8} {'peak':>8} {'fds warm':>9} {'last':>5} {'peak':>5}")
            for name, v in result["daemons"].items():
                print(f"{name:8} {v['rss_mib_after_warmup']:12.1f} {v['rss_mib_last']:8.1f} {v['rss_mib_peak']:8.1f} "
                      f"{v['fds_after_warmup']:9d} {v['fds_last']:5d} {v['fds_peak']:5d}")
        return 0 if not failures else 1
    finally:
        for d in daemons:
            d.terminate()
        for d in daemons:
            d.stop()
        etcd.kill()
        etcd.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
