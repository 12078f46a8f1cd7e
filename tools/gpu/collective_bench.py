"""kvt.collective's AllReduce from PyTorch beside torch.distributed's NCCL AllReduce of the same bf16 tensor,
in one run on the same GPUs (issue 39). One process per GPU:

    python3 tools/gpu/collective_bench.py --world 2 [--sizes-kib 64,1024,16384,262144] [--modes raw,8,4/8] [--json]

Each point: the median over --iters calls of one call's time (CUDA events on the current stream, after
--warmup calls), kvt's widths beside NCCL bf16, and the ratio NCCL time / kvt time (> 1: kvt is faster).
kvt runs its own kernels (no NCCL routing). Prints one table (or JSON) from rank 0.
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
    with kc.Communicator(rank, a.world, store=store, backend="cuda", workspace_bytes=a.workspace_mib << 20) as comm:
        for kib in a.sizes_kib:
            n = kib * 1024 // 2
            x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            y = x.clone()
            # NCCL in place (its values grow call after call; it does not look at them); kvt from x into y, since
            # it refuses a sum that overflowed to inf.
            row = {"bytes": kib * 1024, "nccl_ms": _median_ms(lambda: dist.all_reduce(y), a.iters, a.warmup)}
            for mode in a.modes:
                bits = _width(mode)
                row[f"kvt_{mode}_ms"] = _median_ms(lambda: comm.all_reduce(x, bits=bits, out=y), a.iters,
                                                   a.warmup)
            comm.synchronize()
            rows.append(row)
    dist.barrier()
    if rank == 0:
        doc = {"world": a.world, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "rows": rows}
        if a.json:
            print(json.dumps(doc, indent=2))
        else:
            head = " | ".join(f"kvt {m} ms (NCCL/kvt)" for m in a.modes)
            print(f"{doc['device']} x{a.world}, torch {doc['torch']}, NCCL {doc['nccl']}; bf16, median of {a.iters}")
            print(f"| size | NCCL ms | {head} |")
            print("| ---: | ---: |" + " ---: |" * len(a.modes))
            for r in rows:
                cells = " | ".join(f"{r[f'kvt_{m}_ms']:.4f} ({r['nccl_ms'] / r[f'kvt_{m}_ms']:.2f})" for m in a.modes)
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
