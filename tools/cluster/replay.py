#!/usr/bin/env python3
"""Replays `kvtctl simulate`'s arrivals on real daemons and compares (issue 38: the simulator checked against a
real run at one operating point). One prefill and one decode kvtd on loopback, rate-limited like the simulated
link; each request is offered with every layer ready at its arrival time (the simulation's prefill must be
instant: --prefill-tokens-per-s 1e12); TTFT and time-to-full are read from the decode daemon's events.

    kvtctl simulate --prefill 1 --decode 1 --model smollm2-135m --context 2048,4096 --rate-gbps 1 \\
        --arrivals-per-s 2 --duration-s 20 --prefill-tokens-per-s 1e12 --schemes lynx,int8 --json --with-requests \\
        > sim.json
    python3 tools/cluster/replay.py --kvtd bazel-bin/server/kvtd --sim sim.json [--json]

Needs the kvt Python client on PYTHONPATH (client/python with its stubs).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

import kvt

SHAPES = {"smollm2-135m": (30, 3, 64), "tiny": (4, 2, 16), "llama-3.1-8b": (32, 8, 128)}
SLOTS = 16  # decode-side block ranges in rotation; a slot is reused only after its request is DONE


def pct(values: List[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvtd", required=True)
    ap.add_argument("--sim", required=True, help="kvtctl simulate --json --with-requests output")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sim = json.loads(Path(args.sim).read_text())
    config, arrivals = sim["config"], sim["arrivals"]
    if config["prefill"] != 1 or config["decode"] != 1 or config["prefill_tokens_per_s"] < 1e9:
        sys.exit("error: replay one link with instant prefill: simulate --prefill 1 --decode 1 "
                 "--prefill-tokens-per-s 1e12")
    layers, heads, dim = SHAPES[config["model"]]
    max_blocks = -(-max(a["tokens"] for a in arrivals) // 16)
    src_layout = kvt.KvLayout(num_layers=layers, num_blocks=max_blocks, block_tokens=16, num_kv_heads=heads,
                              head_dim=dim)
    dst_layout = kvt.KvLayout(num_layers=layers, num_blocks=max_blocks * SLOTS, block_tokens=16,
                              num_kv_heads=heads, head_dim=dim)
    work = tempfile.mkdtemp(prefix="kvt-replay-")
    flags = ["--ucx_net_devices=lo", "--log_level=warn"]
    rate = config["rate_gbps"]
    prefill = kvt.Daemon.start(args.kvtd, role="prefill", name="p0", work_dir=work, rate_gbps=rate, extra_flags=flags)
    decode = kvt.Daemon.start(args.kvtd, role="decode", name="d0", work_dir=work, rate_gbps=rate, extra_flags=flags)
    out: Dict[str, Dict[str, float]] = {}
    try:
        with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc, \
                kvt.KvCache.allocate(src_layout) as src, kvt.KvCache.allocate(dst_layout) as dst:
            rng = np.random.default_rng(1)
            for layer in range(layers):
                for view in (src.k_numpy(layer), src.v_numpy(layer)):
                    view[:] = rng.standard_normal(view.shape).astype(np.float32).view(np.uint32) >> 16
            src.register(pc, "src")
            dst.register(dc, "dst")
            for run in sim["runs"]:
                scheme = run["scheme"]
                multi = scheme.startswith("lynx")
                if run["label"] == "lynx-no-priority":
                    continue  # kvtd always puts anchors first: nothing real to compare with
                ttft: List[float] = [0.0] * len(arrivals)
                full: List[float] = [0.0] * len(arrivals)
                slot_free = [threading.Event() for _ in range(SLOTS)]
                for e in slot_free:
                    e.set()

                def follow(i: int, rid: str, slot: int) -> None:
                    anchors: Dict[int, int] = {}
                    fulls: Dict[int, int] = {}
                    for ev in dc.watch(rid, timeout=300):
                        if ev.kind in (kvt.EventKind.ANCHOR_READY, kvt.EventKind.FULL_READY):
                            anchors.setdefault(ev.layer, ev.at_us)
                        if ev.kind is kvt.EventKind.FULL_READY:
                            fulls[ev.layer] = ev.at_us
                        if ev.kind is kvt.EventKind.FAILED:
                            raise ev.error()
                    ttft[i] = (max(anchors.values()) if multi else max(fulls.values())) / 1e3
                    full[i] = max(fulls.values()) / 1e3
                    list(pc.watch(rid, timeout=300))
                    slot_free[slot].set()

                pool = concurrent.futures.ThreadPoolExecutor(max_workers=SLOTS)
                futures = []
                start = time.monotonic()
                for i, a in enumerate(arrivals):
                    slot = i % SLOTS
                    slot_free[slot].wait(300)
                    slot_free[slot].clear()
                    delay = start + a["at_s"] - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    rid = f"{run['label']}-{i}"
                    blocks = -(-a["tokens"] // 16)
                    dc.expect(rid, "dst", range(slot * max_blocks, slot * max_blocks + blocks), a["tokens"],
                              deadline=300)
                    pc.offer(rid, "src", range(blocks), a["tokens"], ready_layers=range(layers), scheme=scheme,
                             decode_daemon=decode.peer_address, deadline=300)
                    futures.append(pool.submit(follow, i, rid, slot))
                for f in futures:
                    f.result()
                sim_ttft = [q["ttft_ms"] for q in run["requests"]]
                sim_full = [q["full_ms"] for q in run["requests"]]
                out[run["label"]] = {
                    "sim_ttft_p50_ms": pct(sim_ttft, 50), "real_ttft_p50_ms": pct(ttft, 50),
                    "sim_ttft_p99_ms": pct(sim_ttft, 99), "real_ttft_p99_ms": pct(ttft, 99),
                    "sim_full_p50_ms": pct(sim_full, 50), "real_full_p50_ms": pct(full, 50),
                    "sim_full_p99_ms": pct(sim_full, 99), "real_full_p99_ms": pct(full, 99)}
                print(f"{run['label']}: replayed {len(arrivals)} requests", file=sys.stderr, flush=True)
    finally:
        prefill.terminate()
        decode.terminate()
        prefill.stop()
        decode.stop()
    if args.json:
        print(json.dumps({"config": config, "requests": len(arrivals), "runs": out}, indent=2))
    else:
        print(f"{len(arrivals)} requests, {config['model']}, {rate} Gbit/s, {config['arrivals_per_s']} req/s")
        print(f"{'run':8} {'metric':10} {'sim ms':>9} {'real ms':>9} {'real/sim':>9}")
        for label, v in out.items():
            for m in ("ttft_p50", "ttft_p99", "full_p50", "full_p99"):
                s, r = v[f"sim_{m}_ms"], v[f"real_{m}_ms"]
                print(f"{label:8} {m:10} {s:9.1f} {r:9.1f} {r / s:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
