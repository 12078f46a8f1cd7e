"""`./kvt engine drafts`: how drafts made on lynx's anchor KV fare against the full-precision KV they are verified
on, token by token, and what a draft-margin rule would have done. No daemons: the prompt's KV is prefilled here,
coded by `kvtctl codec roundtrip --scheme lynx` (the daemon's codec, byte for byte) into its anchor (stage 0) and
full (stage 1) decodes, and the same greedy decoder runs n tokens on each.

Per prompt it records the anchor run's tokens and top-2 logit margins, the full run's tokens, and the first
position where they part. A verification accepts exactly the drafts before that position, so for drafts of
length k the outcome of any stopping rule follows without rerunning: `summarize` prints accepted / drafted for
draft lengths k and margin thresholds tau ("stop drafting at the first draft whose margin on the anchor KV is
below tau; that draft is not proposed", the first draft always proposed). The engine's drafts see layers turn full as they land, so this is the
anchor-only (pessimistic) side of what a run drafts on.

    ./kvt engine drafts --prompts 8 --prompt-tokens 2048 --new-tokens 48 --kvtctl bazel-bin/tools/kvtctl/kvtctl
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from kvt_engine import codec_roundtrip, model_files
from kvt_engine.engine_worker import DTYPES
from kvt_engine.generation import SequenceDecoder, withholds
from kvt_engine.gguf_loader import read_gguf
from kvt_engine.model import Llama
from kvt_engine.paged_cache import BlockAllocator, PagedKvCache
from kvt_engine.prompts import make_prompts
from kvt_engine.tokenizer import Tokenizer

TAUS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
LENGTHS = (8, 12, 16, 32)
BLOCK_TOKENS = 16  # the study's paged cache blocks (the engine's default)


def greedy_run(model: Llama, cache: PagedKvCache, table: torch.Tensor, base: int, first: int,
               n: int) -> tuple[list[int], list[float]]:
    """n greedy tokens after `first` at position `base`, with each choice's top-2 margin (the engine's own plain
    steps)."""
    dec = SequenceDecoder(model, cache, table, base=base, first_input=first)
    for _ in range(n):
        dec.step()
    return dec.token_ids, [t.margin for t in dec.tokens]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    """The first index where a and b differ (len(a) when a is a prefix of b)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def outcome(margins: Sequence[float], parted_at: int, length: int, tau: float) -> tuple[int, int]:
    """(drafted, accepted) for drafts of at most `length` tokens under the engine's rule (generation.withholds:
    the first draft after which a margin is below tau ends drafting)."""
    drafted = min(length, len(margins))
    for i, m in enumerate(margins[:drafted]):
        if withholds(m, tau, i):
            drafted = i
            break
    return drafted, min(drafted, parted_at)


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """accepted / drafted by draft length and threshold, over every prompt."""
    table: dict[str, Any] = {}
    for length in LENGTHS:
        for tau in TAUS:
            d = a = 0
            for r in records:
                dd, aa = outcome(r["anchor_margins"], r["parted_at"], length, tau)
                d, a = d + dd, a + aa
            table[f"{length}/{tau:g}"] = {"length": length, "tau": tau, "drafted": d, "accepted": a,
                                          "ratio": a / d if d else math.nan}
    return table


def roundtrip(kvtctl: str, dense: np.ndarray, work: Path, page_tokens: str,
              chunk_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The anchor and full decodes of `dense` through the daemon's codec (codec_roundtrip)."""
    src = work / "kv.npy"
    np.save(src, dense)
    anchor, full = codec_roundtrip.roundtrip(kvtctl, str(src), str(work / "rt"), page_tokens, chunk_tokens)
    return np.load(anchor), np.load(full)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="kvt engine drafts", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--skip", type=int, default=0, help="prompts to skip first (to extend a study)")
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--decode-dtype", default="float64", choices=sorted(DTYPES))
    p.add_argument("--page-tokens", default="0", help="kvtctl codec roundtrip --page-tokens (0: kvtd's choice)")
    p.add_argument("--kvtctl", required=True)
    p.add_argument("--docs", default=None)
    p.add_argument("--json", action="store_true", help="only JSON on stdout")
    a = p.parse_args(argv)
    for flag, value, least in (("--prompts", a.prompts, 1), ("--prompt-tokens", a.prompt_tokens, 2),
                               ("--new-tokens", a.new_tokens, 1), ("--skip", a.skip, 0)):
        if value < least:
            p.error(f"{flag} must be at least {least}, got {value}")
    gm = read_gguf(model_files.find_model(a.model))
    tok, cfg = Tokenizer(gm.tokenizer), gm.config
    prompts = make_prompts(tok, a.prompts, a.prompt_tokens, 0, root=Path(a.docs) if a.docs else None, skip=a.skip)
    positions = a.prompt_tokens + a.new_tokens + BLOCK_TOKENS
    blocks = positions // BLOCK_TOKENS + 2
    cache = PagedKvCache.allocate(cfg.num_layers, blocks, BLOCK_TOKENS, cfg.num_kv_heads, cfg.head_dim,
                                  device=a.device)
    table = BlockAllocator(blocks).take(blocks)
    prefill = Llama(cfg, gm.weights, device=a.device, dtype=torch.float32, max_positions=positions)
    model = Llama(cfg, gm.weights, device=a.device, dtype=DTYPES[a.decode_dtype], max_positions=positions)
    records = []
    with tempfile.TemporaryDirectory(prefix="kvt-drafts-") as tmp:
        for pr in prompts:
            t = time.monotonic()
            base = len(pr.ids) - 1
            prefill.prefill(pr.ids[:-1], cache, table)
            anchor, full = roundtrip(a.kvtctl, cache.dump_dense(table, base), Path(tmp), a.page_tokens,
                                     codec_roundtrip.kvtd_chunk_tokens(a.device, BLOCK_TOKENS))
            runs = {}
            for name, kv in (("anchor", anchor), ("full", full)):
                cache.load_dense(table, kv)
                runs[name] = greedy_run(model, cache, table, base, pr.ids[-1], a.new_tokens)
            parted = first_difference(runs["anchor"][0], runs["full"][0])
            records.append({"prompt": pr.name, "parted_at": parted,
                            "anchor_tokens": runs["anchor"][0], "anchor_margins": runs["anchor"][1],
                            "full_tokens": runs["full"][0], "full_margins": runs["full"][1]})
            m = runs["anchor"][1][parted] if parted < a.new_tokens else math.nan
            print(f"{pr.name}: drafts part from full at {parted} of {a.new_tokens} (anchor margin there "
                  f"{m:.3f}; {time.monotonic() - t:.0f} s)", file=sys.stderr)
    out = {"config": {"prompts": len(records), "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens,
                      "decode_dtype": a.decode_dtype, "page_tokens": a.page_tokens},
           "summary": summarize(records), "prompts": records}
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'length':>6} " + " ".join(f"{'tau ' + format(t, 'g'):>14}" for t in TAUS))
    for length in LENGTHS:
        cells = []
        for tau in TAUS:
            s = out["summary"][f"{length}/{tau:g}"]
            cells.append(f"{s['accepted']:>4}/{s['drafted']:<4} {s['ratio']:.2f}")
        print(f"{length:>6} " + " ".join(f"{c:>14}" for c in cells))
    print("accepted/drafted ratio: drafts of at most `length` tokens, stopped at the first anchor margin < tau")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
