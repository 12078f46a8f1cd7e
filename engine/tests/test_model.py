"""The paged engine against the dense reference, on random weights: prefill, single steps and batched passes
over shuffled block tables give the reference's logits."""
from __future__ import annotations

import numpy as np
import torch

from kvt_engine.gguf_loader import _unpermute_rope
from kvt_engine.model import Llama
from kvt_engine.paged_cache import PagedKvCache
from reference_llama import reference_logits


def _cache(cfg, blocks: int = 16, block_tokens: int = 4) -> PagedKvCache:
    return PagedKvCache.allocate(cfg.num_layers, blocks, block_tokens, cfg.num_kv_heads, cfg.head_dim)


def _shuffled_table(blocks: int, seed: int = 3) -> torch.Tensor:
    return torch.randperm(blocks, generator=torch.Generator().manual_seed(seed))


def _prefilled(tiny, length: int, seed: int, prefill: int):
    """Random tokens, the dense reference's logits for them, and a float64 engine that prefilled the first
    `prefill` of them into a shuffled paged cache."""
    cfg, w = tiny
    tokens = torch.randint(0, cfg.vocab_size, (length,), generator=torch.Generator().manual_seed(seed)).tolist()
    ref = reference_logits(cfg, w, tokens)
    model = Llama(cfg, w, dtype=torch.float64)
    cache, table = _cache(cfg), _shuffled_table(16)
    model.prefill(tokens[:prefill], cache, table)
    return tokens, ref, model, cache, table


def test_prefill_then_steps_match_the_dense_reference(tiny):
    tokens, ref, model, cache, table = _prefilled(tiny, 23, seed=1, prefill=17)
    for p in range(17, 23):
        logits = model.forward([tokens[p]], p, cache, table)[0]
        torch.testing.assert_close(logits, ref[p], rtol=0, atol=1e-9)


def test_one_batched_pass_matches_the_dense_reference(tiny):
    tokens, ref, model, cache, table = _prefilled(tiny, 30, seed=2, prefill=10)
    logits = model.forward(tokens[10:], 10, cache, table)
    torch.testing.assert_close(logits, ref[10:], rtol=0, atol=1e-9)


def test_float32_engine_is_close_to_the_reference(tiny):
    cfg, w = tiny
    tokens = list(range(5, 25))
    ref = reference_logits(cfg, w, tokens)
    model = Llama(cfg, w, dtype=torch.float32)
    cache, table = _cache(cfg), _shuffled_table(16)
    logits = model.forward(tokens, 0, cache, table)
    torch.testing.assert_close(logits.double(), ref, rtol=1e-3, atol=1e-3)


def test_prefill_reports_each_layer_after_its_kv_is_written(tiny):
    cfg, w = tiny
    model = Llama(cfg, w, dtype=torch.float32)
    cache, table = _cache(cfg), _shuffled_table(16)
    seen = []

    def on_layer(layer: int) -> None:
        written = [bool(cache.gather(l, table, 12)[0].abs().sum() > 0) for l in range(cfg.num_layers)]
        seen.append((layer, written))

    model.prefill(list(range(12)), cache, table, on_layer_kv=on_layer)
    # Layer l's KV is in place when it is reported, and the next layer's is not yet: the callback runs while
    # the prefill goes on (what lets the daemon send layer l while later ones compute), not after it.
    assert seen == [(0, [True, False]), (1, [True, True])]


def test_unpermute_inverts_llama_cpp_permutation_and_keeps_attention_scores():
    heads, d, hidden = 3, 8, 12
    g = torch.Generator().manual_seed(0)
    wq_hf = torch.randn(heads * d, hidden, generator=g).numpy()

    def llama_cpp_permute(w: np.ndarray, n: int) -> np.ndarray:  # convert_hf_to_gguf.py's permute
        return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    np.testing.assert_array_equal(_unpermute_rope(llama_cpp_permute(wq_hf, heads), heads), wq_hf)
