"""Causal grouped-query attention of a run of new query positions over a sequence's keys (gathered from a
paged cache). One function, so that prefill, decode steps and verification passes share it.

    out = causal_gqa(q, k, v, q_start=ctx_before)   # q [n, Hq, D]; k, v [T, Hkv, D], T = q_start + n
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def fused_causal_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A prefill from position 0 through PyTorch's fused attention: q [n, Hq, D]; k, v [n, Hkv, D]; returns
    [n, Hq * D]. The inputs go in as 4-D [1, H, n, D]: the flash and memory-efficient kernels take only batched
    4-D inputs, and 3-D ones fell back to the math path, which materialised every [n, n] score matrix (13.6 ms a
    layer, 97% of an 8k-token SmolLM2 prefill on an H200: `./kvt engine prefill-timing`, docs/ENGINE.md)."""
    n, hq, d = q.shape
    g = hq // k.shape[1]
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, n, D]
    kh = k.transpose(0, 1).repeat_interleave(g, dim=0).unsqueeze(0)
    vh = v.transpose(0, 1).repeat_interleave(g, dim=0).unsqueeze(0)
    out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)[0]
    return out.transpose(0, 1).reshape(n, hq * d)


def causal_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int,
               query_chunk: int = 1024) -> torch.Tensor:
    """Query i sits at position q_start + i and sees keys [0, q_start + i]. q, k and v share a dtype (the
    compute dtype); Hq must be a multiple of Hkv (query head h uses key head h // (Hq / Hkv), as Hugging Face's
    repeat_kv). Returns [n, Hq * D].

    The explicit path (every dtype, every device) computes each query's row with the same operations whatever
    n is; long prefills go through PyTorch's fused attention where it exists (CUDA) and `query_chunk` bounds
    the explicit path's score matrix otherwise."""
    n, hq, d = q.shape
    t, hkv, _ = k.shape
    if t != q_start + n:
        raise ValueError(f"keys cover {t} positions, queries end at {q_start + n}")
    g = hq // hkv
    scale = 1.0 / math.sqrt(d)
    if _HAS_SDPA and q.is_cuda and q_start == 0 and n > 1 and q.dtype != torch.float64:
        return fused_causal_gqa(q, k, v)
    kh = k.permute(1, 2, 0)  # [Hkv, D, T]
    vh = v.transpose(0, 1)  # [Hkv, T, D]
    outs = []
    for c0 in range(0, n, query_chunk):
        c1 = min(n, c0 + query_chunk)
        m = c1 - c0
        qc = q[c0:c1].view(m, hkv, g, d).permute(1, 2, 0, 3).reshape(hkv, g * m, d)
        scores = torch.matmul(qc, kh) * scale  # [Hkv, g*m, T]
        qpos = torch.arange(q_start + c0, q_start + c1, device=q.device)
        kpos = torch.arange(t, device=q.device)
        masked = (kpos[None, :] > qpos[:, None])  # [m, T]
        scores = scores.view(hkv, g, m, t).masked_fill(masked, float("-inf")).view(hkv, g * m, t)
        probs = torch.softmax(scores, dim=-1)
        o = torch.matmul(probs, vh)  # [Hkv, g*m, D]
        outs.append(o.view(hkv, g, m, d).permute(2, 0, 1, 3).reshape(m, hq * d))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
