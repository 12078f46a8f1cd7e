"""`./kvt engine ties`: how far a batched verification pass and single decode steps drift apart, per compute
dtype, on real prompts. Single steps generate n tokens greedily; one batched pass then recomputes the same n
positions (what a verification of n accepted drafts computes). Reported per dtype: the largest logit
difference between the two, the number of greedy choices that flip, and the near-ties, i.e. choices whose
top-2 margin is below 10x that difference (the ones a different summation order could flip). No kvt involved.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from kvt_engine import model_files
from kvt_engine.engine_worker import DTYPES
from kvt_engine.gguf_loader import read_gguf
from kvt_engine.model import Llama
from kvt_engine.paged_cache import BlockAllocator, PagedKvCache
from kvt_engine.prompts import make_prompts
from kvt_engine.speculative import top2_margin
from kvt_engine.tokenizer import Tokenizer


def measure(model: Llama, prefill: Llama, prompt_ids: list[int], n: int, cache: PagedKvCache,
            table: torch.Tensor) -> dict:
    base = len(prompt_ids) - 1
    prefill.prefill(prompt_ids[:-1], cache, table)
    step_logits, tokens, cur = [], [], prompt_ids[-1]
    for i in range(n):
        lg = model.forward([cur], base + i, cache, table)[0]
        step_logits.append(lg)
        cur = int(torch.argmax(lg))
        tokens.append(cur)
    steps = torch.stack(step_logits)
    batched = model.forward([prompt_ids[-1]] + tokens[:-1], base, cache, table)
    diff = float((steps.double() - batched.double()).abs().max())
    flips = int((torch.argmax(batched, -1) != torch.argmax(steps, -1)).sum())
    margins = top2_margin(steps.double())
    return {"max_logit_diff": diff, "flips": flips, "near_ties": int((margins < 10 * diff).sum()),
            "min_margin": float(margins.min()), "tokens": n}


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="kvt engine ties")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--docs", default=None)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    gm = read_gguf(model_files.find_model(a.model))
    tok, cfg = Tokenizer(gm.tokenizer), gm.config
    prompts = make_prompts(tok, a.prompts, a.prompt_tokens, 0, root=Path(a.docs) if a.docs else None)
    positions = a.prompt_tokens + a.new_tokens + 16
    blocks = positions // 16 + 2
    cache = PagedKvCache.allocate(cfg.num_layers, blocks, 16, cfg.num_kv_heads, cfg.head_dim, device=a.device)
    table = BlockAllocator(blocks).take(blocks)
    prefill = Llama(cfg, gm.weights, device=a.device, dtype=torch.float32, max_positions=positions)
    out = {}
    for name in a.dtypes.split(","):
        model = Llama(cfg, gm.weights, device=a.device, dtype=DTYPES[name], max_positions=positions)
        t = time.monotonic()
        rows = [measure(model, prefill, pr.ids, a.new_tokens, cache, table) for pr in prompts]
        out[name] = {
            "prompts": len(rows), "tokens": sum(r["tokens"] for r in rows),
            "max_logit_diff": max(r["max_logit_diff"] for r in rows),
            "flips": sum(r["flips"] for r in rows), "near_ties": sum(r["near_ties"] for r in rows),
            "min_margin": min(r["min_margin"] for r in rows), "seconds": round(time.monotonic() - t, 1),
        }
        del model
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{'dtype':<9} {'tokens':>6} {'max |logit diff|':>17} {'flips':>6} {'near-ties':>9} {'min margin':>10}")
        for name, r in out.items():
            print(f"{name:<9} {r['tokens']:>6} {r['max_logit_diff']:>17.3e} {r['flips']:>6} {r['near_ties']:>9} "
                  f"{r['min_margin']:>10.3e}")
        print("flips: greedy choices that differ between single steps and one batched pass over the same "
              "positions; near-ties: choices whose top-2 margin < 10x the largest difference")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
