"""A Llama decoder (RMSNorm, rotate-half RoPE, grouped-query attention, SwiGLU) in plain PyTorch whose
attention reads and writes a paged KV cache, the memory kvt fills. One compute dtype per instance; the cache
keeps its own (bf16): K and V are rounded to it when written and every attention reads them back from it, so
prefill, decode steps and verification passes all see exactly the values kvt carries.

Not thread-safe (one engine thread per instance); weights are read-only after construction.

    model = Llama(cfg, weights, device="cpu", dtype=torch.float64)
    model.prefill(prompt_ids, cache, table, on_layer_kv=offer)      # writes KV layer by layer
    logits = model.forward(ids, start=pos, cache=cache, block_table=table)   # [len(ids), vocab]
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from kvt_engine.attention import causal_gqa
from kvt_engine.gguf_loader import ModelConfig, ModelWeights
from kvt_engine.paged_cache import PagedKvCache


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(cfg: ModelConfig, max_positions: int, dtype: torch.dtype,
                device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, [max_positions, head_dim] in rotate-half form, computed in float64 then rounded."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype=dtype, device=device), ang.sin().to(dtype=dtype, device=device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [n, heads, D]; cos/sin [n, D]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


class Llama:
    """The model bound to a device and compute dtype. Q/K/V and gate/up projections are fused into one
    matrix each (fewer launches per decode step)."""

    def __init__(self, cfg: ModelConfig, weights: ModelWeights, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, max_positions: Optional[int] = None) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        w = weights.to(dtype=dtype, device=self.device)
        self.embed = w.embed
        self.lm_head = w.lm_head
        self.final_norm = w.final_norm
        self.layers = []
        for lw in w.layers:
            self.layers.append({
                "attn_norm": lw.attn_norm,
                "w_qkv": torch.cat([lw.wq, lw.wk, lw.wv], dim=0).contiguous(),
                "wo": lw.wo,
                "ffn_norm": lw.ffn_norm,
                "w_gate_up": torch.cat([lw.w_gate, lw.w_up], dim=0).contiguous(),
                "w_down": lw.w_down,
            })
        del w
        self.max_positions = max_positions or cfg.context_length
        self.cos, self.sin = rope_tables(cfg, self.max_positions, dtype, self.device)
        self.q_dim = cfg.num_heads * cfg.head_dim
        self.kv_dim = cfg.num_kv_heads * cfg.head_dim
        # The two row-parallel projections of tensor parallelism (attention output, MLP down): a seam where a
        # sharded run sums the ranks' partial products through an AllReduce (kvt_engine.tp_accuracy).
        self.row_linear: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.linear

    def _layer(self, i: int, x: torch.Tensor, start: int, cache: PagedKvCache, block_table: torch.Tensor,
               slots: torch.Tensor, on_kv: Optional[Callable[[int], None]]) -> torch.Tensor:
        cfg = self.cfg
        p = self.layers[i]
        n = x.shape[0]
        h = rms_norm(x, p["attn_norm"], cfg.rms_eps)
        qkv = F.linear(h, p["w_qkv"])
        q = qkv[:, :self.q_dim].view(n, cfg.num_heads, cfg.head_dim)
        k = qkv[:, self.q_dim:self.q_dim + self.kv_dim].view(n, cfg.num_kv_heads, cfg.head_dim)
        v = qkv[:, self.q_dim + self.kv_dim:].view(n, cfg.num_kv_heads, cfg.head_dim)
        cos, sin = self.cos[start:start + n], self.sin[start:start + n]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        cache.write(i, block_table, start, k, v, slots=slots)
        if on_kv is not None:
            on_kv(i)
        kc, vc = cache.gather(i, block_table, start + n)
        attn = causal_gqa(q, kc.to(self.dtype), vc.to(self.dtype), q_start=start)
        x = x + self.row_linear(attn, p["wo"])
        h = rms_norm(x, p["ffn_norm"], cfg.rms_eps)
        gu = F.linear(h, p["w_gate_up"])
        gate, up = gu[:, :cfg.ffn_hidden], gu[:, cfg.ffn_hidden:]
        return x + self.row_linear(F.silu(gate) * up, p["w_down"])

    @torch.no_grad()
    def hidden(self, tokens: Sequence[int] | torch.Tensor, start: int, cache: PagedKvCache,
               block_table: torch.Tensor, on_layer_kv: Optional[Callable[[int], None]] = None) -> torch.Tensor:
        """Runs `tokens` at positions [start, start + n) over the cached positions [0, start), writing their K
        and V into the cache; returns the final-normed hidden states [n, hidden]. `on_layer_kv(l)` is called as
        soon as layer l's K and V are in the cache (the prefill side offers the layer there)."""
        ids = torch.as_tensor(tokens, dtype=torch.int64, device=self.device)
        n = ids.numel()
        if start + n > self.max_positions:
            raise ValueError(f"position {start + n} beyond the model's {self.max_positions}")
        x = self.embed.index_select(0, ids)
        block_table = block_table.to(self.device)  # once: a host table would cost a copy per layer
        slots = cache.slots(block_table, start, n)
        for i in range(self.cfg.num_layers):
            x = self._layer(i, x, start, cache, block_table, slots, on_layer_kv)
        return rms_norm(x, self.final_norm, self.cfg.rms_eps)

    @torch.no_grad()
    def forward(self, tokens: Sequence[int] | torch.Tensor, start: int, cache: PagedKvCache,
                block_table: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Logits [n, vocab] (or [1, vocab] with last_only) in the compute dtype; see `hidden`."""
        h = self.hidden(tokens, start, cache, block_table)
        if last_only:
            h = h[-1:]
        return F.linear(h, self.lm_head)

    @torch.no_grad()
    def prefill(self, tokens: Sequence[int] | torch.Tensor, cache: PagedKvCache, block_table: torch.Tensor,
                on_layer_kv: Optional[Callable[[int], None]] = None) -> None:
        """Writes the KV of `tokens` at positions [0, n), layer by layer; computes no logits."""
        self.hidden(tokens, 0, cache, block_table, on_layer_kv)

    @torch.no_grad()
    def nll(self, tokens: Sequence[int], start: int, cache: PagedKvCache, block_table: torch.Tensor,
            chunk: int = 512) -> tuple[float, int]:
        """Summed negative log-likelihood of tokens[1:] given the cache's [0, start) and tokens[0] at `start`
        (teacher forcing, in chunks); returns (sum, count). Overwrites the cache from `start` on."""
        ids = list(tokens)
        total, count = 0.0, 0
        for c0 in range(0, len(ids) - 1, chunk):
            c1 = min(len(ids) - 1, c0 + chunk)
            logits = self.forward(ids[c0:c1], start + c0, cache, block_table)
            target = torch.as_tensor(ids[c0 + 1:c1 + 1], device=self.device)
            lp = torch.log_softmax(logits.double(), dim=-1)
            total += float(-lp.gather(1, target[:, None]).sum())
            count += c1 - c0
        return total, count
