"""The decode worker: expects a request's KV from its kvtd into its paged cache (a kvt region) and generates.

Progressive schemes (lynx and its split forms): generation starts when every layer is ANCHOR_READY; tokens are
drafts until every layer is FULL_READY (or until `draft_cap` drafts, or a draft after the first at a top-2 margin
below `draft_min_margin`, then it waits); one forward pass on the
full-precision KV, which kvtd wrote over the anchor values in place, verifies them all (generation.py); then
decoding goes on normally. Monolithic schemes (bf16, int8, int4, lynx8, ...) start at DONE.

The cache positions [0, num_tokens) belong to kvtd until the request is DONE; the worker writes only positions
from num_tokens on (the prompt's last token, drafts, generated tokens), which kvtd never touches. One request at
a time; a watcher thread records the request's events.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from typing import Optional

import numpy as np
import torch

from kvt_engine.engine_worker import EngineWorker
from kvt_engine.generation import SamplingOptions, SequenceDecoder

log = logging.getLogger("kvt_engine")

MONOLITHIC = {"bf16", "int8", "int4", "fp8", "lynx8", "lynx4"}
# Drafts after the first stop at a top-2 logit margin below this on the anchor KV (greedy). `./kvt engine drafts`
# on 12 prompts of 4096 tokens: every draft at a margin >= 0.5 matched the full-KV decode, and the drafts that did
# not were at 0.03-0.49 (docs/ENGINE.md, "Drafts that stop at a near-tie").
DRAFT_MIN_MARGIN = 0.5


def is_progressive(scheme: str) -> bool:
    """lynx and lynx-a{a}r{r}... send an anchor stream first; lynx8 / lynx4 and the baselines do not."""
    base = scheme.split("+", 1)[0]
    return base not in MONOLITHIC and base.startswith("lynx")


@dataclasses.dataclass(frozen=True)
class DecodeJob:
    request_id: str
    num_tokens: int  # positions kvt writes: the prompt without its last token
    last_prompt_token: int
    scheme: str
    new_tokens: int
    draft_cap: int = 64
    draft_min_margin: float = DRAFT_MIN_MARGIN  # greedy: drafts after the first stop at a top-2 margin below this
    progressive: Optional[bool] = None  # None: from the scheme
    sampling: SamplingOptions = SamplingOptions()
    deadline_s: float = 120.0
    check_full: bool = True  # progressive: decode again from the full KV (untimed) and compare token for token
    heldout: Optional[list[int]] = None  # held-out tokens after the prompt: perplexity on the received KV
    slack_tokens: int = 0  # extra positions to reserve (held-out text)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.draft_min_margin) and self.draft_min_margin >= 0):
            raise ValueError(f"draft_min_margin {self.draft_min_margin} must be a finite number >= 0 (0: no stop)")


@dataclasses.dataclass
class LayerTimes:
    anchor_at: list[Optional[float]]  # time.monotonic() when the watcher saw the event
    full_at: list[Optional[float]]
    anchor_us: list[Optional[int]]  # the daemon's at_us
    full_us: list[Optional[int]]


@dataclasses.dataclass
class DecodeResult:
    t0: float  # time.monotonic() just before Expect: every time below is measured from it by the caller
    progressive: bool
    start_at: float  # generation started (every layer anchor-ready, or DONE)
    full_at: Optional[float]  # every layer FULL_READY
    done_at: Optional[float]
    tokens: list[int]
    produced_at: list[float]  # per output token (a draft: when drafted, if accepted)
    final_at: list[float]  # per output token: when known final
    was_draft: list[bool]
    margins: list[float]
    drafted: int
    accepted: int
    verify_ms: list[float]
    verify_min_margin: list[float]
    draft_at: list[float]  # every draft, accepted or not
    waited_for_full_ms: float  # the decode loop's idle wait at the draft cap
    layers: LayerTimes
    full_tokens: Optional[list[int]] = None  # check_full: decoding again from the full KV
    full_margins: Optional[list[float]] = None
    heldout_nll: Optional[float] = None
    heldout_count: int = 0
    draft_margins: list[float] = dataclasses.field(default_factory=list)  # each draft's top-2 margin where drafted
    withheld_margin: Optional[float] = None  # the draft withheld for its margin (draft_min_margin), if one was


class _Watcher(threading.Thread):
    """Follows a request's events; sets `all_anchor`, `all_full` and `finished`."""

    def __init__(self, client, request_id: str, num_layers: int, timeout: float) -> None:
        super().__init__(name=f"watch-{request_id}", daemon=True)
        self.client, self.request_id, self.timeout = client, request_id, timeout
        self.n = num_layers
        self.times = LayerTimes([None] * num_layers, [None] * num_layers, [None] * num_layers, [None] * num_layers)
        self.all_anchor = threading.Event()
        self.all_full = threading.Event()
        self.done = threading.Event()
        self.finished = threading.Event()
        self.error: Optional[BaseException] = None
        self.done_at: Optional[float] = None
        self.full_at: Optional[float] = None
        self._anchor_count = 0
        self._full_count = 0

    def run(self) -> None:
        import kvt

        try:
            for ev in self.client.watch(self.request_id, timeout=self.timeout, side=kvt.Side.DECODE):
                now = time.monotonic()
                if ev.kind in (kvt.EventKind.ANCHOR_READY, kvt.EventKind.FULL_READY):
                    if self.times.anchor_at[ev.layer] is None:  # a single-stream layer is "anchor-ready" too
                        self.times.anchor_at[ev.layer], self.times.anchor_us[ev.layer] = now, ev.at_us
                        self._anchor_count += 1
                        if self._anchor_count == self.n:
                            self.all_anchor.set()
                    if ev.kind == kvt.EventKind.FULL_READY and self.times.full_at[ev.layer] is None:
                        self.times.full_at[ev.layer], self.times.full_us[ev.layer] = now, ev.at_us
                        self._full_count += 1
                        if self._full_count == self.n:
                            self.full_at = now
                            self.all_full.set()
                elif ev.kind == kvt.EventKind.DONE:
                    self.done_at = now
                    self.done.set()
                elif ev.kind == kvt.EventKind.FAILED:
                    self.error = ev.error()
        except BaseException as e:  # noqa: BLE001 - handed to the decode loop
            self.error = e
        finally:
            self.finished.set()
            self.done.set()
            self.all_anchor.set()  # wake any waiter; it checks `error` and the counts
            self.all_full.set()

    def wait(self, event: threading.Event, what: str, timeout: float) -> None:
        if not event.wait(timeout):
            raise TimeoutError(f"{self.request_id}: not {what} within {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"{self.request_id}: transfer failed: {self.error}")
        if event is self.all_full and self._full_count < self.n:
            raise RuntimeError(f"{self.request_id}: finished with {self._full_count}/{self.n} layers full")


class DecodeWorker(EngineWorker):
    def __init__(self, opts) -> None:
        super().__init__(opts)
        self._job: Optional[DecodeJob] = None
        self._table: Optional[torch.Tensor] = None
        self._watcher: Optional[_Watcher] = None
        self._t0 = 0.0

    def expect(self, job: DecodeJob) -> float:
        """Reserves blocks, calls Expect and starts watching; returns t0, the monotonic time just before
        Expect (the request's start as the decode side sees it)."""
        if self._job is not None:
            raise RuntimeError("one request at a time")
        positions = job.num_tokens + max(job.new_tokens, job.draft_cap) + 2 + job.slack_tokens
        table = self.blocks.take(self.cache.blocks_for(positions))
        kv_blocks = table[:self.cache.blocks_for(job.num_tokens)].tolist()
        t0 = time.monotonic()
        try:
            self.client.expect(job.request_id, self.opts.region_id, kv_blocks, job.num_tokens,
                               deadline=job.deadline_s)
        except BaseException:
            self.blocks.give_back(table)
            raise
        self._job, self._table, self._t0 = job, table, t0
        self._watcher = _Watcher(self.client, job.request_id, self.cfg.num_layers, job.deadline_s)
        self._watcher.start()
        return t0

    def generate(self) -> DecodeResult:
        """Generates job.new_tokens tokens (see the module docstring), then the untimed checks."""
        job, table, w = self._job, self._table, self._watcher
        if job is None or table is None or w is None:
            raise RuntimeError("expect() first")
        try:
            return self._generate(job, table, w)
        except BaseException:
            # Ends the transfer on both daemons (the watcher then sees FAILED) before the blocks are reused.
            self.cancel_quietly(job.request_id)
            raise
        finally:
            w.join(job.deadline_s)
            self.blocks.give_back(table)
            self._job = self._table = self._watcher = None

    def _generate(self, job: DecodeJob, table: torch.Tensor, w: _Watcher) -> DecodeResult:
        progressive = is_progressive(job.scheme) if job.progressive is None else job.progressive
        dec = SequenceDecoder(self.model, self.cache, table, base=job.num_tokens,
                              first_input=job.last_prompt_token, sampling=job.sampling)
        waited = 0.0
        if progressive:
            w.wait(w.all_anchor, "anchor-ready", job.deadline_s)
            start = time.monotonic()
            while not w.all_full.is_set() and len(dec.drafts) < min(job.draft_cap, job.new_tokens):
                if dec.draft(job.draft_min_margin) is None:
                    break  # a near-tie on the anchor KV (generation.withholds): the full KV decides it
            wait_start = time.monotonic()
            w.wait(w.all_full, "full-ready", job.deadline_s)
            waited = time.monotonic() - wait_start
            dec.verify()
        else:
            w.wait(w.done, "done", job.deadline_s)
            w.wait(w.all_full, "full-ready", job.deadline_s)
            start = time.monotonic()
        while len(dec.tokens) < job.new_tokens:
            dec.step()
        draft_at = [t.produced_at for t in dec.tokens if t.was_draft]
        toks = dec.tokens[:job.new_tokens]
        w.finished.wait(job.deadline_s)
        res = DecodeResult(
            t0=self._t0, progressive=progressive, start_at=start, full_at=w.full_at, done_at=w.done_at,
            tokens=[t.token for t in toks], produced_at=[t.produced_at for t in toks],
            final_at=[t.final_at for t in toks], was_draft=[t.was_draft for t in toks],
            margins=[t.margin for t in toks],
            drafted=sum(v.drafted for v in dec.verifications), accepted=sum(v.accepted for v in dec.verifications),
            verify_ms=[1e3 * (v.ended_at - v.started_at) for v in dec.verifications],
            verify_min_margin=[v.min_margin for v in dec.verifications],
            draft_at=draft_at, draft_margins=list(dec.draft_margins), withheld_margin=dec.withheld_margin,
            waited_for_full_ms=1e3 * waited, layers=w.times)
        # Untimed from here: the same engine from the same (now full-precision) blocks, and perplexity.
        if progressive and job.check_full:
            ref = SequenceDecoder(self.model, self.cache, table, base=job.num_tokens,
                                  first_input=job.last_prompt_token, sampling=job.sampling)
            for _ in range(job.new_tokens):
                ref.step()
            res.full_tokens = ref.token_ids
            res.full_margins = [t.margin for t in ref.tokens]
        if job.heldout:
            res.heldout_nll, res.heldout_count = self.model.nll([job.last_prompt_token] + list(job.heldout),
                                                                job.num_tokens, self.cache, table)
        return res

    def heldout_on_dense(self, kv_npy: str, last_prompt_token: int, heldout: list[int]) -> tuple[float, int]:
        """Perplexity of held-out text over KV loaded from a dense .npy [L, 2, T, H, D] (e.g. a codec
        roundtrip's anchor-only decode) instead of a transfer. Returns (summed NLL, count)."""
        kv = np.load(kv_npy, mmap_mode="r")
        n = kv.shape[2]
        table = self.blocks.take(self.cache.blocks_for(n + len(heldout) + 2))
        try:
            self.cache.load_dense(table, torch.from_numpy(np.array(kv)))  # a writable copy
            return self.model.nll([last_prompt_token] + list(heldout), n, self.cache, table)
        finally:
            self.blocks.give_back(table)
