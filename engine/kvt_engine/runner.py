"""The experiment behind `./kvt engine`: two kvtd daemons (prefill with the emulated link rate, decode), a
prefill worker and a decode worker (separate processes), and for each prompt and scheme one request through
them, timed from the decode side's Expect. Also the untimed checks: progressive output against the same
engine's output from the same full-precision blocks, agreement with bf16, and held-out perplexity on the KV
each scheme delivered (anchor-only through `kvtctl codec roundtrip` of the dumped KV).

    results = EngineRun(options).run()      # a dict, see report.py for its fields
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from kvt_engine import codec_roundtrip
from kvt_engine.decode_worker import DRAFT_MIN_MARGIN, DecodeJob, DecodeResult, is_progressive
from kvt_engine.engine_worker import WorkerOptions
from kvt_engine.generation import SamplingOptions
from kvt_engine.gguf_loader import read_gguf
from kvt_engine.prefill_worker import PrefillJob, PrefillResult
from kvt_engine.prompts import Prompt, make_prompts
from kvt_engine.tokenizer import Tokenizer
from kvt_engine.worker_rpc import WorkerProcess

log = logging.getLogger("kvt_engine")

NEAR_TIE = 1e-6  # top-2 logit margins below this count as near-ties (float64 decode differs ~1e-12)


@dataclasses.dataclass
class RunOptions:
    model_path: str
    device: str = "cpu"
    prompt_tokens: int = 512
    new_tokens: int = 16
    schemes: tuple[str, ...] = ("bf16", "int8", "int4", "lynx")
    rate_gbps: float = 0.0
    prompts: int = 1
    heldout_tokens: int = 128
    ppl_prompts: int = -1  # prompts that get perplexities (-1: all; 0: none)
    anchor_ppl: bool = True  # anchor-only perplexity through kvtctl codec roundtrip (needs the KV dump)
    draft_cap: int = 64
    draft_min_margin: float = DRAFT_MIN_MARGIN  # DecodeJob.draft_min_margin
    decode_dtype: str = "float64"
    prefill_dtype: str = ""  # "" = float32 on the CPU, bfloat16 on a GPU
    block_tokens: int = 16
    kvtd: Optional[str] = None
    kvtctl: Optional[str] = None
    docs: Optional[str] = None
    dump_kv: Optional[str] = None  # folder for the prompts' KV as [L, 2, T, H, D] float32 .npy
    dump_prompts: int = -1  # how many prompts to dump (-1: all)
    sampling: SamplingOptions = SamplingOptions()
    warmup: bool = True
    check_full: bool = True
    deadline_s: float = 300.0
    kvtd_flags: tuple[str, ...] = ()
    threads: int = 0
    work_dir: Optional[str] = None
    max_seconds: float = 0.0  # stop starting prompts after this long (0: no limit); the result says so


def _ms(t: Optional[float], t0: float) -> Optional[float]:
    return None if t is None else round(1e3 * (t - t0), 3)


def chunk_kib_for(rate_gbps: float) -> int:
    """kvtd's data-plane chunk for a link rate: at most ~5 ms of the link (16..512 KiB). An anchor that becomes
    ready waits for the chunk on the wire, and while anchors queue the scheduler still promotes one residual
    chunk per second (transport/lane_scheduler.h): at 5 Mbit/s the default 512 KiB chunk is 0.84 s of link,
    which would hand the residual almost half of it while the prefill is still producing anchors."""
    if rate_gbps <= 0:
        return 512
    return max(16, min(512, int(rate_gbps * 1e9 / 8 * 0.005 / 1024)))


def _find_kvtctl(kvtd: str, given: Optional[str]) -> Optional[str]:
    for cand in [given, str(Path(kvtd).with_name("kvtctl"))]:
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class EngineRun:
    def __init__(self, opts: RunOptions) -> None:
        self.opts = opts

    def run(self) -> dict[str, Any]:
        import kvt

        o = self.opts
        gm = read_gguf(o.model_path, with_weights=False)
        cfg = gm.config
        tok = Tokenizer(gm.tokenizer)
        prompts = make_prompts(tok, o.prompts, o.prompt_tokens, o.heldout_tokens,
                               root=Path(o.docs) if o.docs else None)
        cuda = o.device.startswith("cuda")
        prefill_dtype = o.prefill_dtype or ("bfloat16" if cuda else "float32")
        positions = o.prompt_tokens + max(o.new_tokens, o.draft_cap) + o.heldout_tokens + 8
        blocks = (positions + o.block_tokens - 1) // o.block_tokens + 4
        with contextlib.ExitStack() as stack:
            work = Path(o.work_dir) if o.work_dir else Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="kvt-engine-")))
            work.mkdir(parents=True, exist_ok=True)
            kvtd = kvt.find_kvtd(o.kvtd)
            flags = list(o.kvtd_flags)
            if not any(f.startswith("--chunk_kib") for f in flags):
                flags.append(f"--chunk_kib={chunk_kib_for(o.rate_gbps)}")
            decode_d = stack.enter_context(kvt.Daemon.start(kvtd, role="decode", work_dir=str(work),
                                                            extra_flags=flags))
            prefill_d = stack.enter_context(kvt.Daemon.start(kvtd, role="prefill", work_dir=str(work),
                                                             rate_gbps=o.rate_gbps, extra_flags=flags))
            common = dict(model_path=o.model_path, device=o.device, block_tokens=o.block_tokens,
                          num_blocks=blocks, max_positions=positions + 16, threads=o.threads)
            t_start = time.monotonic()
            # Both workers load at once (each reads and dequantizes the GGUF).
            decode_w = stack.enter_context(WorkerProcess(
                "kvt_engine.decode_worker:DecodeWorker",
                WorkerOptions(socket=decode_d.socket, compute_dtype=o.decode_dtype, region_id="decode", **common)))
            prefill_w = stack.enter_context(WorkerProcess(
                "kvt_engine.prefill_worker:PrefillWorker",
                WorkerOptions(socket=prefill_d.socket, compute_dtype=prefill_dtype, region_id="prefill", **common)))
            log.info("workers up in %.1f s (decode pid %d, prefill pid %d)", time.monotonic() - t_start,
                     decode_w.pid, prefill_w.pid)
            self._decode, self._prefill, self._peer = decode_w, prefill_w, decode_d.peer_address
            if o.warmup:
                warm = Prompt("warmup", prompts[0].ids[:min(64, len(prompts[0].ids))], [])
                for scheme in dict.fromkeys(["int8"] + list(o.schemes)):
                    self._job(warm, scheme, new_tokens=2, heldout=None, dump=None, check_full=False)
            dump_dir = Path(o.dump_kv) if o.dump_kv else None
            if dump_dir:
                dump_dir.mkdir(parents=True, exist_ok=True)
            kvtctl = _find_kvtctl(kvtd, o.kvtctl)
            if kvtctl is None and o.anchor_ppl and any(is_progressive(s) for s in o.schemes):
                raise FileNotFoundError(f"the anchor-only perplexity needs kvtctl (given: {o.kvtctl}, beside kvtd: "
                                        f"{Path(kvtd).with_name('kvtctl')}); pass --kvtctl or --no-anchor-ppl")
            records = []
            loop_start = time.monotonic()
            stopped_early = False
            for pi, prompt in enumerate(prompts):
                if o.max_seconds and pi and time.monotonic() - loop_start > o.max_seconds:
                    stopped_early = True
                    log.warning("time budget of %.0f s spent: %d of %d prompts run", o.max_seconds, pi,
                                len(prompts))
                    break
                with_ppl = o.ppl_prompts < 0 or pi < o.ppl_prompts
                want_dump = (dump_dir is not None and (o.dump_prompts < 0 or pi < o.dump_prompts))
                need_anchor = with_ppl and o.anchor_ppl and any(
                    is_progressive(s) for s in o.schemes)
                dump = None
                if want_dump:
                    dump = str(dump_dir / f"kv_{pi:02d}_{_stem(prompt.name)}.npy")
                elif need_anchor:
                    dump = str(work / f"kv_{pi:02d}.npy")
                per_scheme = {}
                for si, scheme in enumerate(o.schemes):
                    per_scheme[scheme] = self._job(prompt, scheme, o.new_tokens,
                                                   heldout=prompt.heldout if with_ppl else None,
                                                   dump=dump if si == 0 else None, check_full=o.check_full)
                    log.info("prompt %d/%d %s: %s", pi + 1, len(prompts), scheme,
                             _brief(per_scheme[scheme]))
                rec = {"prompt": prompt.name, "prompt_tokens": len(prompt.ids), "schemes": per_scheme}
                if need_anchor and dump:
                    rec["anchor_only_ppl"] = self._anchor_ppl(kvtctl, dump, prompt, work)
                    if not want_dump:
                        os.unlink(dump)
                if "bf16" in per_scheme:
                    ref = per_scheme["bf16"]["tokens"]
                    for s in per_scheme.values():
                        same = sum(a == b for a, b in zip(s["tokens"], ref))
                        s["agreement_with_bf16"] = same / max(1, len(ref))
                records.append(rec)
            return {
                "config": {
                    "model": gm.name, "model_path": o.model_path, "device": o.device,
                    "prompt_tokens": o.prompt_tokens, "kv_tokens": o.prompt_tokens - 1, "new_tokens": o.new_tokens,
                    "schemes": list(o.schemes), "rate_gbps": o.rate_gbps, "prompts": len(records),
                    "prompts_asked": len(prompts), "stopped_early": stopped_early,
                    "heldout_tokens": o.heldout_tokens, "draft_cap": o.draft_cap,
                    "draft_min_margin": o.draft_min_margin, "decode_dtype": o.decode_dtype,
                    "prefill_dtype": prefill_dtype, "block_tokens": o.block_tokens, "kvtd_flags": flags,
                    "sampling": dataclasses.asdict(o.sampling), "layers": cfg.num_layers,
                    "kv_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "cores": os.cpu_count(),
                },
                "summary": summarize(records, list(o.schemes)),
                "prompts": records,
            }

    def _job(self, prompt: Prompt, scheme: str, new_tokens: int, heldout: Optional[list[int]],
             dump: Optional[str], check_full: bool) -> dict[str, Any]:
        o = self.opts
        rid = f"{_stem(prompt.name)}-{scheme}-{uuid.uuid4().hex[:8]}"
        djob = DecodeJob(request_id=rid, num_tokens=len(prompt.ids) - 1, last_prompt_token=prompt.ids[-1],
                         scheme=scheme, new_tokens=new_tokens, draft_cap=o.draft_cap,
                         draft_min_margin=o.draft_min_margin, sampling=o.sampling,
                         # Sampled outputs are compared by distribution (tests/test_speculative.py), not token by
                         # token: the verification consumes random numbers that a plain run does not.
                         deadline_s=o.deadline_s, check_full=check_full and o.sampling.greedy, heldout=heldout,
                         slack_tokens=(len(heldout) + 1) if heldout else 0)
        t0 = self._decode.call("expect", job=djob)
        self._prefill.send("run", job=PrefillJob(rid, prompt.ids[:-1], scheme, self._peer, o.deadline_s, dump))
        self._decode.send("generate")
        d: DecodeResult = self._decode.receive(o.deadline_s + 60)
        p: PrefillResult = self._prefill.receive(o.deadline_s + 60)
        return job_record(scheme, d, p, t0)

    def _anchor_ppl(self, kvtctl: str, dump: str, prompt: Prompt, work: Path) -> dict[str, Any]:
        prefix = str(work / "roundtrip")
        # Paged as the transfer was: kvtd's --page_tokens if given (the last one wins, as in kvtd), else 0, kvtd's
        # own choice.
        page_tokens = "0"
        for flag in self.opts.kvtd_flags:
            if flag.startswith("--page_tokens="):
                page_tokens = flag.split("=", 1)[1]
        # And chunked as it was.
        anchor, _ = codec_roundtrip.roundtrip(kvtctl, dump, prefix, page_tokens,
                                              codec_roundtrip.kvtd_chunk_tokens(self.opts.device,
                                                                                self.opts.block_tokens))
        try:
            nll, n = self._decode.call("heldout_on_dense", kv_npy=anchor,
                                       last_prompt_token=prompt.ids[-1], heldout=prompt.heldout)
        finally:
            for f in work.glob("roundtrip.*.npy"):
                f.unlink()
        return {"nll": nll, "count": n, "ppl": math.exp(nll / n)}


def _stem(doc: str) -> str:
    """'whatsnew/2.0.rst.txt' -> 'whatsnew-2.0' (file names, request ids)."""
    return doc.removesuffix(".rst.txt").replace("/", "-")


def _brief(r: dict[str, Any]) -> str:
    s = f"ttft {r['ttft_ms']:.0f} ms"
    if r.get("tt32t_ms") is not None:
        s += f", tt32t {r['tt32t_ms']:.0f} ms"
    if r["progressive"]:
        s += f", drafts {r['accepted']}/{r['drafted']}, identical_to_full {r.get('identical_to_full', 'n/a')}"
    return s


def job_record(scheme: str, d: DecodeResult, p: PrefillResult, t0: float) -> dict[str, Any]:
    n = len(d.tokens)
    rec: dict[str, Any] = {
        "scheme": scheme,
        "progressive": d.progressive,
        "ttft_ms": _ms(d.produced_at[0], t0) if n else None,
        "tt32t_ms": _ms(d.produced_at[31], t0) if n >= 32 else None,
        "ttft_final_ms": _ms(d.final_at[0], t0) if n else None,
        "tt32t_final_ms": _ms(d.final_at[31], t0) if n >= 32 else None,
        "output_tokens": n,
        "drafted": d.drafted,
        "accepted": d.accepted,
        "tokens": d.tokens,
        "token_ms": [_ms(t, t0) for t in d.produced_at],
        "final_ms": [_ms(t, t0) for t in d.final_at],
        "was_draft": d.was_draft,
        "draft_ms": [_ms(t, t0) for t in d.draft_at],
        "draft_margins": d.draft_margins,
        "withheld_margin": d.withheld_margin,
        "verify_ms": d.verify_ms,
        "waited_for_full_ms": d.waited_for_full_ms,
        "start_ms": _ms(d.start_at, t0),
        "anchor_ready_ms": _ms(max(t for t in d.layers.anchor_at if t is not None), t0),
        "full_ready_ms": _ms(d.full_at, t0),
        "done_ms": _ms(d.done_at, t0),
        "layer_anchor_ms": [_ms(t, t0) for t in d.layers.anchor_at],
        "layer_full_ms": [_ms(t, t0) for t in d.layers.full_at],
        "prefill_start_ms": _ms(p.started_at, t0),
        "prefill_compute_ms": round(1e3 * (p.computed_at - p.started_at), 3),
        "prefill_offer_ms": [_ms(t, t0) for t in p.offered_at],
        "prefill_done_ms": _ms(p.done_at, t0),
        "min_margin": min(d.margins) if d.margins and not any(math.isnan(m) for m in d.margins) else None,
        "near_ties": sum(1 for m in d.margins if m < NEAR_TIE),
    }
    if d.progressive and d.full_tokens is not None:
        same = d.tokens == d.full_tokens[:n]
        rec["identical_to_full"] = same
        rec["full_tokens"] = d.full_tokens
        if not same:
            i = next(i for i, (a, b) in enumerate(zip(d.tokens, d.full_tokens)) if a != b)
            rec["first_difference"] = {"index": i, "progressive": d.tokens[i], "full": d.full_tokens[i],
                                       "margin_progressive": d.margins[i],
                                       "margin_full": (d.full_margins or [math.nan] * n)[i]}
    if d.heldout_nll is not None:
        rec["heldout"] = {"nll": d.heldout_nll, "count": d.heldout_count,
                          "ppl": math.exp(d.heldout_nll / d.heldout_count)}
    return rec


def _median(xs: list[Optional[float]]) -> Optional[float]:
    v = [x for x in xs if x is not None]
    return round(statistics.median(v), 3) if v else None


def _ppl(parts: list[Optional[dict[str, Any]]]) -> Optional[float]:
    v = [p for p in parts if p]
    if not v:
        return None
    return math.exp(sum(p["nll"] for p in v) / sum(p["count"] for p in v))


def summarize(records: list[dict[str, Any]], schemes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in schemes:
        rs = [r["schemes"][s] for r in records]
        row: dict[str, Any] = {
            "ttft_ms": _median([r["ttft_ms"] for r in rs]),
            "tt32t_ms": _median([r["tt32t_ms"] for r in rs]),
            "ttft_final_ms": _median([r["ttft_final_ms"] for r in rs]),
            "tt32t_final_ms": _median([r["tt32t_final_ms"] for r in rs]),
            "anchor_ready_ms": _median([r["anchor_ready_ms"] for r in rs]),
            "full_ready_ms": _median([r["full_ready_ms"] for r in rs]),
            "prefill_compute_ms": _median([r["prefill_compute_ms"] for r in rs]),
            "output_tokens": sum(r["output_tokens"] for r in rs),
            "drafted": sum(r["drafted"] for r in rs),
            "accepted": sum(r["accepted"] for r in rs),
            "near_ties": sum(r["near_ties"] for r in rs),
            "prompts": len(rs),
        }
        progressive = any(r["progressive"] for r in rs)
        row["progressive"] = progressive
        if progressive:
            row["acceptance"] = round(row["accepted"] / row["drafted"], 4) if row["drafted"] else None
            ident = [r.get("identical_to_full") for r in rs]
            row["identical_to_full"] = all(f is True for f in ident) if all(f is not None for f in ident) else None
            row["identical_prompts"] = sum(1 for f in ident if f is True)
        agree = [r["agreement_with_bf16"] for r in rs if "agreement_with_bf16" in r]
        if agree:
            row["agreement_with_bf16"] = round(sum(agree) / len(agree), 4)
        row["heldout_ppl"] = _ppl([r.get("heldout") for r in rs])
        out[s] = row
    ppl = {}
    anchor = _ppl([r.get("anchor_only_ppl") for r in records])
    if anchor is not None:
        ppl["anchor-only"] = anchor
    for s in schemes:
        if out[s]["heldout_ppl"] is not None:
            ppl["full" if is_progressive(s) else s] = out[s]["heldout_ppl"]
    return {"schemes": out, "heldout_perplexity": ppl}
