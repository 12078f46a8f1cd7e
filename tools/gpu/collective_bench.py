"""kvt.collective's AllReduce from PyTorch beside torch.distributed's NCCL AllReduce of the same bf16 tensor,
in one run on the same GPUs (issue 39). One process per GPU:

    python3 tools/gpu/collective_bench.py --world 2 [--sizes-kib 64,1024,16384,262144] [--modes raw,8,4/8]
        [--one-shot-kib 4096] [--graph] [--json]

Each point: the median over --iters calls of one call's time (CUDA events on the current stream, after
--warmup calls), kvt's widths beside NCCL bf16, and the ratio NCCL time / kvt time (> 1: kvt is faster).
kvt runs its own kernels (no NCCL routing): the two-step round at every size, and the one-shot round
(`one_shot_bytes`) at sizes up to --one-shot-kib (0: not measured). With --graph, as engines run decode steps:
--graph-calls calls captured in one CUDA graph (NCCL's and kvt's alike), each point the median over --iters
replays of a replay's time divided by the calls in it, so launch costs and the ranks' skew at a call's start
count once per graph, not per call. Prints one table (or JSON) from rank 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _median_ms(fn, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _graph_ms(fn, iters: int, warmup: int, calls: int) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # NCCL wants its first calls outside a capture
        for _ in range(max(warmup, 1)):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def _width(mode: str):
    if mode == "raw":
        return (0, 0)
    a, _, b = mode.partition("/")
    return (int(a), int(b or a))


def _rank(rank: int, a: argparse.Namespace, port: int) -> None:
    import kvt.collective as kc

    torch.cuda.set_device(rank)
    store = dist.TCPStore("127.0.0.1", port, a.world, rank == 0)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=a.world)
    rows = []
    time = (lambda fn: _graph_ms(fn, a.iters, a.warmup, a.graph_calls)) if a.graph else (
        lambda fn: _median_ms(fn, a.iters, a.warmup))
    workspace = a.workspace_mib << 20
    with kc.Communicator(rank, a.world, store=store, backend="cuda", workspace_bytes=workspace,
                         one_shot_bytes=0) as comm, \
            kc.Communicator(rank, a.world, store=store, backend="cuda", workspace_bytes=workspace,
                            one_shot_bytes=max(a.one_shot_kib, 1) << 10) as one_shot:
        for kib in a.sizes_kib:
            n = kib * 1024 // 2
            x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            y = x.clone()
            # NCCL in place (its values grow call after call; it does not look at them); kvt from x into y, since
            # it refuses a sum that overflowed to inf.
            row = {"bytes": kib * 1024, "nccl_ms": time(lambda: dist.all_reduce(y))}
            for mode in a.modes:
                bits = _width(mode)
                row[f"kvt_{mode}_ms"] = time(lambda: comm.all_reduce(x, bits=bits, out=y))
                if kib <= a.one_shot_kib:
                    row[f"kvt_{mode}_1shot_ms"] = time(lambda: one_shot.all_reduce(x, bits=bits, out=y))
            comm.synchronize()
            one_shot.synchronize()
            rows.append(row)
    dist.barrier()
    if rank == 0:
        doc = {"world": a.world, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "graph": a.graph, "rows": rows}
        if a.json:
            print(json.dumps(doc, indent=2))
        else:
            cols = [(f"kvt_{m}_ms", f"kvt {m}") for m in a.modes]
            if a.one_shot_kib > 0:
                cols += [(f"kvt_{m}_1shot_ms", f"kvt {m} one-shot") for m in a.modes]
            how = f"{a.graph_calls} calls a CUDA graph, median of {a.iters} replays" if a.graph else \
                f"median of {a.iters} calls"
            print(f"{doc['device']} x{a.world}, torch {doc['torch']}, NCCL {doc['nccl']}; bf16, {how}")
            print("| size | NCCL ms | " + " | ".join(f"{h} ms (NCCL/kvt)" for _, h in cols) + " |")
            print("| ---: | ---: |" + " ---: |" * len(cols))
            for r in rows:
                cells = " | ".join(f"{r[k]:.4f} ({r['nccl_ms'] / r[k]:.2f})" if k in r else "-" for k, _ in cols)
                print(f"| {r['bytes'] // 1024} KiB | {r['nccl_ms']:.4f} | {cells} |")
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=torch.cuda.device_count())
    p.add_argument("--sizes-kib", default="64,256,1024,4096,16384,65536,262144")
    p.add_argument("--modes", default="raw,8,4/8,4")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--workspace-mib", type=int, default=256)
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--one-shot-kib", type=int, default=4096)
    p.add_argument("--graph", action="store_true")
    p.add_argument("--graph-calls", type=int, default=20)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    a.sizes_kib = [int(s) for s in a.sizes_kib.split(",")]
    a.modes = a.modes.split(",")
    if a.world < 2 or a.world > torch.cuda.device_count():
        p.error(f"--world must be 2..{torch.cuda.device_count()} (one GPU a rank: NCCL refuses two ranks on one)")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    mp.spawn(_rank, args=(a, a.port), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
