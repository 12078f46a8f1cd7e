"""SmolLM2-135M through the paged engine: English text gets a sensible perplexity and an instruct prompt a
coherent greedy answer. Needs the real model file."""
from __future__ import annotations

import math

import torch

from kvt_engine.model import Llama
from kvt_engine.paged_cache import BlockAllocator, PagedKvCache
from kvt_engine.tokenizer import Tokenizer

TEXT = (
    "Python is an easy to learn, powerful programming language. It has efficient high-level data structures "
    "and a simple but effective approach to object-oriented programming. Python's elegant syntax and dynamic "
    "typing, together with its interpreted nature, make it an ideal language for scripting and rapid "
    "application development in many areas on most platforms. The Python interpreter and the extensive "
    "standard library are freely available in source or binary form for all major platforms from the Python "
    "web site, and may be freely distributed. The same site also contains distributions of and pointers to "
    "many free third party Python modules, programs and tools, and additional documentation."
)


def _engine(smollm2, dtype=torch.float32):
    cfg = smollm2.config
    model = Llama(cfg, smollm2.weights, dtype=dtype, max_positions=1024)
    cache = PagedKvCache.allocate(cfg.num_layers, 64, 16, cfg.num_kv_heads, cfg.head_dim)
    return model, cache, BlockAllocator(64).take(64)


def test_perplexity_of_english_text_is_sensible(smollm2):
    tok = Tokenizer(smollm2.tokenizer)
    model, cache, table = _engine(smollm2)
    ids = tok.encode(TEXT)
    nll, n = model.nll(ids, 0, cache, table)
    ppl = math.exp(nll / n)
    assert 2.0 < ppl < 30.0, ppl


def test_greedy_answer_to_an_instruct_prompt_is_coherent(smollm2):
    tok = Tokenizer(smollm2.tokenizer)
    model, cache, table = _engine(smollm2)
    ids = tok.encode(tok.chat_prompt("What is the capital of France? Answer in one sentence."))
    model.prefill(ids[:-1], cache, table)
    out, cur = [], ids[-1]
    for pos in range(len(ids) - 1, len(ids) + 15):
        cur = int(model.forward([cur], pos, cache, table, last_only=True).argmax())
        out.append(cur)
        if cur == tok.eos_id:
            break
    assert "Paris" in tok.decode(out)
