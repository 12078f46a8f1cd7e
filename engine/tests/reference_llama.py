"""A straightforward, non-paged Llama forward (dense K/V, full causal attention, repeat_kv, rotate-half RoPE
written out from the formulas) that the paged engine is checked against. K and V are rounded to bf16 as the
paged cache stores them; everything else runs in float64."""
from __future__ import annotations

import math

import torch

from kvt_engine.gguf_loader import ModelConfig, ModelWeights


def reference_logits(cfg: ModelConfig, w: ModelWeights, tokens: list[int]) -> torch.Tensor:
    w = w.to(torch.float64)
    n, d = len(tokens), cfg.head_dim
    x = w.embed[torch.tensor(tokens)]
    pos = torch.arange(n, dtype=torch.float64)
    freqs = [1.0 / cfg.rope_theta ** (2 * i / d) for i in range(d // 2)]
    ang = pos[:, None] * torch.tensor(freqs, dtype=torch.float64)[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)

    def rope(t: torch.Tensor) -> torch.Tensor:  # [n, heads, d]: pairs (i, i + d/2)
        a, b = t[..., :d // 2], t[..., d // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1)

    def norm(t: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + cfg.rms_eps) * g

    group = cfg.num_heads // cfg.num_kv_heads
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    for lw in w.layers:
        h = norm(x, lw.attn_norm)
        q = rope((h @ lw.wq.T).view(n, cfg.num_heads, d))
        k = rope((h @ lw.wk.T).view(n, cfg.num_kv_heads, d)).bfloat16().double()
        v = (h @ lw.wv.T).view(n, cfg.num_kv_heads, d).bfloat16().double()
        heads = []
        for hq in range(cfg.num_heads):
            kv = hq // group
            s = (q[:, hq] @ k[:, kv].T) / math.sqrt(d)
            s = s.masked_fill(causal, float("-inf"))
            heads.append(torch.softmax(s, dim=-1) @ v[:, kv])
        x = x + torch.cat(heads, dim=-1) @ lw.wo.T
        h = norm(x, lw.ffn_norm)
        g = h @ lw.w_gate.T
        x = x + ((g * torch.sigmoid(g)) * (h @ lw.w_up.T)) @ lw.w_down.T
    return norm(x, w.final_norm) @ w.lm_head.T
