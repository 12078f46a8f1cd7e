"""What the tests compare transfers against: a request's tokens read out of a cache, and the codec's own
round trip of them (kvtctl codec roundtrip, the same code the daemons run) rounded to the cache's dtype."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

import numpy as np

import kvt


def fill_random(cache: kvt.KvCache, seed: int) -> None:
    """Every layer's K and V gets normal values (V scaled by 3, so K and V differ in range)."""
    rng = np.random.default_rng(seed)
    layout = cache.layout
    for layer in range(layout.num_layers):
        for view, scale in ((cache.k_numpy(layer), 1.0), (cache.v_numpy(layer), 3.0)):
            values = rng.standard_normal(view.shape, dtype=np.float32) * scale
            view[...] = to_storage(values, layout.dtype)


def to_storage(values: np.ndarray, dtype: kvt.DType) -> np.ndarray:
    """float32 values as the cache stores them: bf16 rounded to nearest even (as uint16 bits), fp16, fp32."""
    if dtype is kvt.DType.BF16:
        bits = values.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return values.astype(dtype.numpy_dtype)


def to_float(stored: np.ndarray, dtype: kvt.DType) -> np.ndarray:
    """Stored values (numpy views) as float32."""
    if dtype is kvt.DType.BF16:
        return (stored.astype(np.uint32) << 16).view(np.float32)
    return stored.astype(np.float32)


def gather(cache: kvt.KvCache, block_ids: Sequence[int], num_tokens: int) -> np.ndarray:
    """The request's first `num_tokens` tokens in `block_ids` as float32 [layers, 2, tokens, heads, dim]."""
    layout = cache.layout
    out = np.empty((layout.num_layers, 2, num_tokens, layout.num_kv_heads, layout.head_dim), np.float32)
    for layer in range(layout.num_layers):
        for kind, view in enumerate((cache.k_numpy(layer), cache.v_numpy(layer))):
            blocks = view[list(block_ids)]
            if layout.order is kvt.BlockOrder.HND:
                blocks = blocks.transpose(0, 2, 1, 3)
            tokens = blocks.reshape(-1, layout.num_kv_heads, layout.head_dim)[:num_tokens]
            out[layer, kind] = to_float(tokens, layout.dtype)
    return out


def codec_roundtrip(kvtctl: str, scheme: str, values: np.ndarray, work_dir: Path) -> np.ndarray:
    """The codec's full-precision decode of `values` [L, 2, T, H, D] float32 in `scheme`, as float32."""
    source = work_dir / f"{scheme}.in.npy"
    prefix = work_dir / f"{scheme}.out"
    np.save(source, values)
    # --page-tokens 0: pages of the size kvtd picks by itself, as the daemons under test do.
    subprocess.run([kvtctl, "codec", "roundtrip", "--scheme", scheme, "--page-tokens", "0", "--in", str(source),
                    "--out-prefix", str(prefix)], check=True, capture_output=True)
    return np.load(f"{prefix}.full.npy")


def expected_after_transfer(kvtctl: str, scheme: str, source: np.ndarray, dtype: kvt.DType,
                            work_dir: Path) -> np.ndarray:
    """What the decode blocks must hold after a transfer of `source` in `scheme`: the codec's decode rounded to
    the cache's dtype (the daemons' contract, which kvtctl demo --verify checks too)."""
    decoded = codec_roundtrip(kvtctl, scheme, source, work_dir)
    return to_float(to_storage(decoded, dtype), dtype)
