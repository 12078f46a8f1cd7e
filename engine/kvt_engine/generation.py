"""The decode-side generation state of one sequence: plain steps, drafts on provisional (anchor-precision) KV,
and one batched verification of the drafts on the final (full-precision) KV. It knows nothing of kvt: the
decode worker decides when the cache holds anchor or full values and calls draft() or verify() accordingly.

Positions. The prompt's KV covers [0, base) (what the prefill side sent); the prompt's last token is the first
input, at position `base`, so the first output token is computed here, from the KV that arrived (and timed as a
user sees it). The input that produces output token j sits at position base + j.

Not thread-safe.

    dec = SequenceDecoder(model, cache, table, base=len(prompt) - 1, first_input=prompt[-1])
    while not full_ready(): dec.draft()      # on anchor KV
    dec.verify()                             # one forward pass over [input, drafts...] on full KV
    while len(dec.tokens) < n: dec.step()
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

import torch

from kvt_engine.model import Llama
from kvt_engine.paged_cache import PagedKvCache
from kvt_engine.speculative import Verdict, greedy_tokens, top2_margin, verify_greedy, verify_sampling


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """greedy (the default) or temperature sampling with a seeded generator."""

    greedy: bool = True
    temperature: float = 1.0
    seed: int = 0


@dataclasses.dataclass
class OutputToken:
    token: int
    produced_at: float  # time.monotonic() when computed (a draft: when drafted)
    final_at: float  # when known final (a draft: the end of the verification that accepted it)
    was_draft: bool
    margin: float  # top-1 minus top-2 logit of the distribution that decided it (greedy); nan when sampling


@dataclasses.dataclass
class VerifyRecord:
    drafted: int
    accepted: int
    started_at: float
    ended_at: float
    min_margin: float  # the smallest top-2 margin among the rows that decided committed tokens


def withholds(margin: float, min_margin: float, pending_drafts: int) -> bool:
    """The drafting rule: a draft is withheld (and drafting stops) when drafts are already pending and its top-2
    logit margin is below `min_margin`. Shared by the decoder and `./kvt engine drafts`."""
    return pending_drafts > 0 and margin < min_margin


class SequenceDecoder:
    """See the module docstring. `cache` positions from `base` on belong to this decoder."""

    def __init__(self, model: Llama, cache: PagedKvCache, block_table: torch.Tensor, base: int,
                 first_input: int, sampling: SamplingOptions = SamplingOptions(),
                 clock=time.monotonic) -> None:
        self.model = model
        self.cache = cache
        self.block_table = block_table
        self.base = base
        self.first_input = int(first_input)
        self.sampling = sampling
        self.clock = clock
        self.tokens: list[OutputToken] = []
        self.drafts: list[int] = []
        self.draft_margins: list[float] = []  # every draft proposed, verified or not: its margin on the draft KV
        self.withheld_margin: Optional[float] = None  # the last draft() that withheld its token
        self._draft_times: list[float] = []
        self._draft_probs: list[torch.Tensor] = []
        self.verifications: list[VerifyRecord] = []
        self._gen = torch.Generator(device="cpu")
        self._gen.manual_seed(sampling.seed)

    @property
    def token_ids(self) -> list[int]:
        return [t.token for t in self.tokens]

    def _next_input(self) -> tuple[int, int]:
        """(token, position) of the next input after the committed tokens and the drafts."""
        if self.drafts:
            tok = self.drafts[-1]
        elif self.tokens:
            tok = self.tokens[-1].token
        else:
            tok = self.first_input
        return tok, self.base + len(self.tokens) + len(self.drafts)

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.double() / self.sampling.temperature, dim=-1)

    def _choose(self, logits: torch.Tensor) -> tuple[int, float, Optional[torch.Tensor]]:
        if self.sampling.greedy:
            return int(greedy_tokens(logits)), float(top2_margin(logits)), None
        probs = self._probs(logits)
        tok = int(torch.multinomial(probs.cpu(), 1, generator=self._gen))
        return tok, float("nan"), probs

    def step(self) -> int:
        """One committed token from the cache as it is (call only when it holds final KV)."""
        if self.drafts:
            raise RuntimeError("drafts pending: verify() first")
        tok_in, pos = self._next_input()
        logits = self.model.forward([tok_in], pos, self.cache, self.block_table)[0]
        tok, margin, _ = self._choose(logits)
        now = self.clock()
        self.tokens.append(OutputToken(tok, now, now, False, margin))
        return tok

    def draft(self, min_margin: float = 0.0) -> Optional[int]:
        """One provisional token (the cache holds anchor KV), or None when it is not the first pending draft and
        its top-2 logit margin is below `min_margin` (greedy only; `withholds`): such a token is as likely to
        flip on the full KV as not, and every draft after it would be lost with it, so it is not proposed and
        drafting should stop (the caller waits for the full KV). The first draft is always proposed: it is the
        user's first token. The withheld token's margin is kept in `withheld_margin`; its position's K and V,
        computed here, are rewritten by verify()."""
        tok_in, pos = self._next_input()
        logits = self.model.forward([tok_in], pos, self.cache, self.block_table)[0]
        tok, margin, probs = self._choose(logits)
        if self.sampling.greedy and withholds(margin, min_margin, len(self.drafts)):
            self.withheld_margin = margin
            return None
        self.drafts.append(tok)
        self.draft_margins.append(margin)
        self._draft_times.append(self.clock())
        if probs is not None:
            self._draft_probs.append(probs)
        return tok

    def inject_drafts(self, tokens: list[int]) -> None:
        """Proposes drafts from elsewhere (tests; other draft sources). Greedy only: sampling needs each
        draft's distribution."""
        if not self.sampling.greedy:
            raise ValueError("injected drafts carry no draft distribution; greedy verification only")
        now = self.clock()
        for t in tokens:
            self.drafts.append(int(t))
            self.draft_margins.append(float("nan"))
            self._draft_times.append(now)

    def verify(self) -> Verdict:
        """Checks every pending draft in one forward pass over [input, d1..dk] on the cache's (now final) KV,
        which also rewrites those positions' K and V; commits the accepted drafts and the correction (or bonus)
        token. With no drafts this is one ordinary step."""
        start = self.clock()
        k = len(self.drafts)
        tok_in = self.tokens[-1].token if self.tokens else self.first_input
        pos = self.base + len(self.tokens)
        logits = self.model.forward([tok_in] + self.drafts, pos, self.cache, self.block_table)
        if self.sampling.greedy:
            verdict = verify_greedy(self.drafts, logits)
            margins = top2_margin(logits).tolist()
        else:
            target = self._probs(logits)
            q = torch.stack(self._draft_probs) if k else target[:0]
            verdict = verify_sampling(self.drafts, q, target, generator=self._gen)
            margins = [float("nan")] * (k + 1)
        end = self.clock()
        for i in range(verdict.accepted):
            self.tokens.append(OutputToken(self.drafts[i], self._draft_times[i], end, True, margins[i]))
        self.tokens.append(OutputToken(verdict.next_token, end, end, False, margins[verdict.accepted]))
        self.verifications.append(VerifyRecord(k, verdict.accepted, start, end,
                                               min(margins[:verdict.accepted + 1])))
        self.drafts, self._draft_times, self._draft_probs = [], [], []
        return verdict
