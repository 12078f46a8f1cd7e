"""The verification rules of speculative decoding, applied to drafts generated on anchor-precision KV and
checked against logits computed on full-precision KV (Lynx section 4.3).

- Greedy: accept the longest prefix of drafts equal to the target's argmax; the first mismatch is replaced by
  the target's token (the correction); if every draft matches, the target's next token is a bonus.
- Sampling (Leviathan et al. / Chen et al.): accept draft x_i with probability min(1, p_i(x_i) / q_i(x_i));
  on the first rejection sample from norm(max(0, p_i - q_i)); if all are accepted sample the bonus from p_k.
  The accepted tokens plus the correction are distributed exactly as samples from p.

Pure functions over tensors; thread-safe.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch


@dataclasses.dataclass(frozen=True)
class Verdict:
    """`accepted` drafts are kept; `next_token` follows them (a correction if accepted < len(drafts), else a
    bonus token)."""

    accepted: int
    next_token: int


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Argmax over the last axis; ties go to the lowest token id (torch.argmax's documented rule), so the
    choice is deterministic."""
    return torch.argmax(logits, dim=-1)


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """Per row, top-1 minus top-2 logit: how near a greedy choice was to a tie."""
    top = torch.topk(logits, 2, dim=-1).values
    return top[..., 0] - top[..., 1]


def verify_greedy(drafts: Sequence[int], target_logits: torch.Tensor) -> Verdict:
    """target_logits: [len(drafts) + 1, vocab]; row i is the target's prediction for the token after the
    verified input i (row 0 predicts drafts[0])."""
    if target_logits.shape[0] != len(drafts) + 1:
        raise ValueError(f"{len(drafts)} drafts need {len(drafts) + 1} logit rows, got {target_logits.shape[0]}")
    target = greedy_tokens(target_logits).tolist()
    n = 0
    while n < len(drafts) and int(drafts[n]) == target[n]:
        n += 1
    return Verdict(accepted=n, next_token=int(target[n]))


def verify_sampling(drafts: Sequence[int], draft_probs: torch.Tensor, target_probs: torch.Tensor,
                    generator: Optional[torch.Generator] = None) -> Verdict:
    """draft_probs: [k, vocab], the distributions the drafts were sampled from; target_probs: [k + 1, vocab].
    Uses `generator` for every random draw (uniforms and the residual/bonus sample)."""
    k = len(drafts)
    if draft_probs.shape[0] != k or target_probs.shape[0] != k + 1:
        raise ValueError("need k draft rows and k + 1 target rows")
    for i, x in enumerate(drafts):
        p, q = float(target_probs[i, x]), float(draft_probs[i, x])
        u = float(torch.rand((), generator=generator, device="cpu"))
        if q > 0 and u < min(1.0, p / q):
            continue
        residual = torch.clamp(target_probs[i] - draft_probs[i], min=0)
        total = float(residual.sum())
        dist = residual / total if total > 0 else target_probs[i]
        tok = int(torch.multinomial(dist.double().cpu(), 1, generator=generator))
        return Verdict(accepted=i, next_token=tok)
    tok = int(torch.multinomial(target_probs[k].double().cpu(), 1, generator=generator))
    return Verdict(accepted=k, next_token=tok)
