"""What kvt's quantized AllReduce does to a real model run tensor-parallel (docs/COLLECTIVES.md, "Accuracy on
SmolLM2"): `./kvt engine tp-accuracy`.

The model's two row-parallel projections (attention output and MLP down, as Megatron-style TP shards them) are
split over W ranks by input features; each rank's partial product is summed by a real kvt.collective
Communicator of W ranks (TCP on loopback, one thread per rank in this process, every rank reducing its own
partial), and rank 0's result (bitwise every rank's: checked) goes on. Per AllReduce width, over held-out English
text: the perplexity, and the fraction of positions whose greedy next token equals the unsharded fp32 model's.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from kvt_engine import model_files

# Widths as the collectives' benchmark names them: "raw" unquantized fp32, "N" N-bit both steps, "A/B"
# reduce-scatter A bits then all-gather B, a trailing "s" spike reserving.
DEFAULT_WIDTHS = "raw,8,4/8,4,3,2s"


class _Store:
    """An in-process store for the ranks' bootstrap (set/get, get waits)."""

    def __init__(self) -> None:
        self._values: Dict[str, bytes] = {}
        self._cv = threading.Condition()

    def set(self, key: str, value: Any) -> None:
        with self._cv:
            self._values[key] = value.encode() if isinstance(value, str) else value
            self._cv.notify_all()

    def get(self, key: str) -> bytes:
        with self._cv:
            if not self._cv.wait_for(lambda: key in self._values, timeout=60):
                raise TimeoutError(f"no {key}")
            return self._values[key]


def parse_width(width: str) -> Tuple[Tuple[int, int], bool]:
    """((step1 bits, step2 bits), spike_reserve) of a width name."""
    spike = width.endswith("s")
    body = width[:-1] if spike else width
    if body == "raw":
        return (0, 0), spike
    a, _, b = body.partition("/")
    return (int(a), int(b or a)), spike


class ShardedAllReduce:
    """W Communicators of one group, one per thread; `__call__(partials)` reduces the W partial products."""

    def __init__(self, world: int, group_size: int) -> None:
        import kvt.collective as kc

        self.world, self.group_size = world, group_size
        self.pool = ThreadPoolExecutor(max_workers=world)
        store = _Store()
        make = [self.pool.submit(kc.Communicator, r, world, store=store, timeout=60.0) for r in range(world)]
        self.comms = [f.result() for f in make]
        self.bits: Tuple[int, int] = (0, 0)
        self.spike = False
        self.calls = 0

    def __call__(self, partials: List[np.ndarray]) -> np.ndarray:
        jobs = [self.pool.submit(c.all_reduce, p, bits=self.bits, group_size=self.group_size,
                                 spike_reserve=self.spike) for c, p in zip(self.comms, partials)]
        for j in jobs:
            j.result()
        for r in range(1, self.world):
            if partials[r].tobytes() != partials[0].tobytes():
                raise AssertionError(f"rank {r}'s AllReduce result differs from rank 0's")
        self.calls += 1
        return partials[0]

    def close(self) -> None:
        list(self.pool.map(lambda c: c.close(), self.comms))
        self.pool.shutdown()


def row_parallel(reduce: ShardedAllReduce):
    """A Llama.row_linear that splits the input features over the ranks and sums the partials with `reduce`."""

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        bounds = np.linspace(0, x.shape[-1], reduce.world + 1).astype(int)
        partials = [np.ascontiguousarray(F.linear(x[..., a:b], w[:, a:b]).float().numpy())
                    for a, b in zip(bounds[:-1], bounds[1:])]
        return torch.from_numpy(reduce(partials)).to(x.dtype)

    return linear


def score(model, ids: Sequence[int], cache, table) -> Tuple[float, int, torch.Tensor]:
    """(summed NLL of ids[1:], count, greedy next token at every position) by teacher forcing."""
    logits = model.forward(list(ids[:-1]), 0, cache, table)
    target = torch.as_tensor(list(ids[1:]))
    lp = torch.log_softmax(logits.double(), dim=-1)
    return float(-lp.gather(1, target[:, None]).sum()), len(ids) - 1, logits.argmax(dim=-1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from kvt_engine.gguf_loader import read_gguf
    from kvt_engine.model import Llama
    from kvt_engine.paged_cache import BlockAllocator, PagedKvCache
    from kvt_engine.prompts import make_prompts
    from kvt_engine.tokenizer import Tokenizer

    p = argparse.ArgumentParser(prog="kvt engine tp-accuracy", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--worlds", default="2,4", help="tensor-parallel sizes, comma-separated")
    p.add_argument("--widths", default=DEFAULT_WIDTHS, help="AllReduce widths (raw, N, A/B, trailing s: spikes)")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--tokens", type=int, default=512, help="tokens scored per prompt")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    a = p.parse_args(argv)
    try:
        worlds = [int(w) for w in a.worlds.split(",")]
        widths = a.widths.split(",")
        for w in widths:
            parse_width(w)  # a bad name fails before the model loads
    except ValueError as e:
        p.error(f"--worlds takes integers and --widths names like raw, 8, 4/8, 2s ({e})")
    if any(w < 1 or w > 64 for w in worlds):
        p.error(f"--worlds must be 1..64, got {a.worlds}")

    gm = read_gguf(model_files.find_model(a.model))
    tok = Tokenizer(gm.tokenizer)
    cfg = gm.config
    model = Llama(cfg, gm.weights, dtype=torch.float32, max_positions=a.tokens + 16)
    cache = PagedKvCache.allocate(cfg.num_layers, (a.tokens + 16) // 16 + 1, 16, cfg.num_kv_heads, cfg.head_dim)
    table = BlockAllocator(cache.num_blocks).take(cache.num_blocks)
    prompts = make_prompts(tok, a.prompts, a.tokens, 0)
    log = (lambda *x: print(*x, file=sys.stderr)) if a.json else print

    base = [score(model, pr.ids, cache, table) for pr in prompts]
    base_nll = sum(b[0] for b in base) / sum(b[1] for b in base)
    rows: List[Dict[str, Any]] = [{"world": 1, "width": "fp32, unsharded", "perplexity": math.exp(base_nll),
                                   "agreement": 1.0}]
    for world in worlds:
        reduce = ShardedAllReduce(world, a.group_size)
        model.row_linear = row_parallel(reduce)
        try:
            for width in widths:
                reduce.bits, reduce.spike = parse_width(width)
                t = time.monotonic()
                got = [score(model, pr.ids, cache, table) for pr in prompts]
                nll = sum(g[0] for g in got) / sum(g[1] for g in got)
                same = sum(int((g[2] == b[2]).sum()) for g, b in zip(got, base))
                total = sum(b[1] for b in base)
                rows.append({"world": world, "width": width, "perplexity": math.exp(nll), "agreement": same / total})
                log(f"world {world} width {width}: perplexity {math.exp(nll):.4f}, agreement {same / total:.4f} "
                    f"({time.monotonic() - t:.1f} s)")
        finally:
            model.row_linear = F.linear
            reduce.close()
    doc = {"model": gm.name, "prompts": [pr.name for pr in prompts], "tokens_per_prompt": a.tokens,
           "group_size": a.group_size, "rows": rows}
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"\n{gm.name}, {len(prompts)} prompts x {a.tokens} tokens, groups of {a.group_size}")
    print("| TP | AllReduce width | perplexity | agreement with fp32 |\n| ---: | --- | ---: | ---: |")
    for r in rows:
        print(f"| {r['world']} | {r['width']} | {r['perplexity']:.4f} | {r['agreement']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
