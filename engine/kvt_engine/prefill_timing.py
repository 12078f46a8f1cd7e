"""`./kvt engine prefill-timing`: how long the prefill itself takes, layer by layer, with no kvt involved. The
prefill worker synchronizes the device after each layer's KV is written (so kvtd may read it) and offers the
layer; this times the same forward with the same per-layer synchronization and nothing else, so that a run's
`prefill_offer_ms` can be split into the model's own time and what the transfer adds (docs/ENGINE.md)."""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Sequence

import torch

from kvt_engine import model_files
from kvt_engine.engine_worker import DTYPES, synchronize
from kvt_engine.gguf_loader import read_gguf
from kvt_engine.model import Llama
from kvt_engine.paged_cache import BlockAllocator, PagedKvCache
from kvt_engine.prompts import make_prompts
from kvt_engine.tokenizer import Tokenizer


def time_prefill(model: Llama, ids: list[int], cache: PagedKvCache, table: torch.Tensor,
                 device: torch.device) -> list[float]:
    """Runs one prefill of `ids`; returns when each layer's KV was written and synchronized, in ms from the
    start (the prefill worker's offer points, without the offers)."""
    marks: list[float] = []
    synchronize(device)
    t0 = time.monotonic()

    def mark(layer: int) -> None:
        synchronize(device)
        marks.append((time.monotonic() - t0) * 1e3)

    model.prefill(ids, cache, table, on_layer_kv=mark)
    synchronize(device)
    return marks


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="kvt engine prefill-timing")
    p.add_argument("--model", default="smollm2-135m", help="a known model name or a .gguf path")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3, help="timed prefills after one untimed warm-up")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    p.add_argument("--docs", default=None, help="folder of .rst.txt documents (default: Debian's python3.11-doc)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.repeats < 1 or a.prompt_tokens < 2:
        p.error("--repeats must be >= 1 and --prompt-tokens >= 2")
    device = torch.device(a.device)
    gm = read_gguf(model_files.find_model(a.model))
    cfg = gm.config
    prompt = make_prompts(Tokenizer(gm.tokenizer), 1, a.prompt_tokens, 0, root=Path(a.docs) if a.docs else None)[0]
    ids = prompt.ids[:-1]
    blocks = len(ids) // 16 + 2
    cache = PagedKvCache.allocate(cfg.num_layers, blocks, 16, cfg.num_kv_heads, cfg.head_dim,
                                  dtype=DTYPES[a.dtype], device=device)
    table = BlockAllocator(blocks).take(blocks)
    model = Llama(cfg, gm.weights, device=device, dtype=DTYPES[a.dtype], max_positions=len(ids) + 16)
    time_prefill(model, ids, cache, table, device)  # warm-up: kernels chosen, memory allocated
    runs = [time_prefill(model, ids, cache, table, device) for _ in range(a.repeats)]
    totals = [r[-1] for r in runs]
    gaps = [b - a_ for r in runs for a_, b in zip(r, r[1:])]
    out = {"device": str(device), "dtype": a.dtype, "prompt_tokens": len(ids), "layers": cfg.num_layers,
           "repeats": a.repeats, "last_layer_ms_median": statistics.median(totals),
           "first_layer_ms_median": statistics.median(r[0] for r in runs),
           "per_layer_ms_median": statistics.median(gaps), "per_layer_ms_max": max(gaps)}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"prefill of {len(ids)} tokens on {device} in {a.dtype}, {cfg.num_layers} layers, median of "
              f"{a.repeats}: last layer's KV at {out['last_layer_ms_median']:.1f} ms, first at "
              f"{out['first_layer_ms_median']:.1f} ms, {out['per_layer_ms_median']:.2f} ms a layer "
              f"(max {out['per_layer_ms_max']:.2f})")
    return 0
