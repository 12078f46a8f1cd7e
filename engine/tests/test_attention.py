"""The fused prefill attention against the explicit path (where torch has scaled_dot_product_attention: not
Debian's 1.13, which CI runs; the GPU sweep's torch has it), and the prefill timing tool on random weights."""
from __future__ import annotations

import pytest
import torch

from kvt_engine.attention import _HAS_SDPA, causal_gqa, fused_causal_gqa
from kvt_engine.model import Llama
from kvt_engine.paged_cache import PagedKvCache
from kvt_engine.prefill_timing import time_prefill


@pytest.mark.skipif(not _HAS_SDPA, reason="this torch has no scaled_dot_product_attention")
@pytest.mark.parametrize("n,hq,hkv,d", [(37, 6, 2, 16), (5, 3, 3, 8), (64, 9, 3, 64)])
def test_fused_prefill_attention_matches_the_explicit_path(n: int, hq: int, hkv: int, d: int) -> None:
    g = torch.Generator().manual_seed(n * 7 + hq)
    q = torch.randn(n, hq, d, generator=g, dtype=torch.float64)
    k = torch.randn(n, hkv, d, generator=g, dtype=torch.float64)
    v = torch.randn(n, hkv, d, generator=g, dtype=torch.float64)
    fused = fused_causal_gqa(q, k, v)  # on the CPU: the same shapes the CUDA path hands PyTorch
    explicit = causal_gqa(q, k, v, q_start=0)  # float64 never takes the fused path
    assert fused.shape == (n, hq * d)
    torch.testing.assert_close(fused, explicit, rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(not _HAS_SDPA, reason="this torch has no scaled_dot_product_attention")
def test_fused_attention_is_causal() -> None:
    # Changing the last key and value must not change any earlier query's output.
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(8, 4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    k2, v2 = k.clone(), v.clone()
    k2[-1] += 5.0
    v2[-1] -= 5.0
    a, b = fused_causal_gqa(q, k, v), fused_causal_gqa(q, k2, v2)
    torch.testing.assert_close(a[:-1], b[:-1])
    assert not torch.allclose(a[-1], b[-1])


def test_prefill_timing_marks_every_layer_in_order(tiny) -> None:
    cfg, w = tiny
    model = Llama(cfg, w, dtype=torch.float32)
    cache = PagedKvCache.allocate(cfg.num_layers, 8, 4, cfg.num_kv_heads, cfg.head_dim)
    marks = time_prefill(model, list(range(20)), cache, torch.arange(8), torch.device("cpu"))
    assert len(marks) == cfg.num_layers
    assert all(m >= 0 for m in marks) and marks == sorted(marks)
    assert cache.gather(cfg.num_layers - 1, torch.arange(8), 20)[0].abs().sum() > 0  # the last layer's KV landed
