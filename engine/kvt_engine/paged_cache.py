"""A paged KV cache: per layer, a K and a V tensor of fixed-size token blocks, [num_blocks, block_tokens,
num_kv_heads, head_dim] (vLLM's NHD order, the order kvt's regions use), and the block tables that map a
sequence's positions onto blocks. The tensors may be views of a kvt region (`kvt.KvCache.k(layer)`), which
kvtd writes while the engine reads: the engine touches only positions it owns (see DecodeWorker).

Not thread-safe: one engine thread uses a cache.

    cache = PagedKvCache.allocate(num_layers=2, num_blocks=64, block_tokens=16, num_kv_heads=3, head_dim=64)
    table = BlockAllocator(64).take(cache.blocks_for(100))
    cache.write(layer, table, start=0, k=k_new, v=v_new)   # k_new: [n, heads, head_dim]
    k, v = cache.gather(layer, table, length=100)          # [100, heads, head_dim], the cache's dtype
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


class PagedKvCache:
    """Wraps per-layer K/V block tensors; owns nothing beyond references to them."""

    def __init__(self, k_layers: Sequence[torch.Tensor], v_layers: Sequence[torch.Tensor]) -> None:
        if len(k_layers) != len(v_layers) or not k_layers:
            raise ValueError("need one K and one V tensor per layer")
        shape = tuple(k_layers[0].shape)
        if len(shape) != 4:
            raise ValueError(f"block tensors must be [num_blocks, block_tokens, heads, head_dim], got {shape}")
        for t in list(k_layers) + list(v_layers):
            if tuple(t.shape) != shape or t.dtype != k_layers[0].dtype or t.device != k_layers[0].device:
                raise ValueError("every layer's K and V must have the same shape, dtype and device")
            if not t.is_contiguous():
                raise ValueError("block tensors must be contiguous")
        self.k_layers = list(k_layers)
        self.v_layers = list(v_layers)
        self.num_layers = len(k_layers)
        self.num_blocks, self.block_tokens, self.num_kv_heads, self.head_dim = shape
        self.dtype = k_layers[0].dtype
        self.device = k_layers[0].device

    @classmethod
    def allocate(cls, num_layers: int, num_blocks: int, block_tokens: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cpu") -> "PagedKvCache":
        """A cache in fresh zeroed tensors (tests, and engines without kvt)."""
        shape = (num_blocks, block_tokens, num_kv_heads, head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        return cls(k, v)

    @classmethod
    def from_kvt(cls, kv_cache) -> "PagedKvCache":
        """Views of a `kvt.KvCache` (shm or CUDA memory registered with kvtd), NHD order."""
        n = kv_cache.layout.num_layers
        return cls([kv_cache.k(l) for l in range(n)], [kv_cache.v(l) for l in range(n)])

    def blocks_for(self, tokens: int) -> int:
        return (tokens + self.block_tokens - 1) // self.block_tokens

    def _flat(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(self.num_blocks * self.block_tokens, self.num_kv_heads, self.head_dim)

    def slots(self, block_table: torch.Tensor, start: int, n: int) -> torch.Tensor:
        """Flat slot indices of positions [start, start + n) of a sequence (int64, on the cache's device)."""
        pos = torch.arange(start, start + n, device=block_table.device)
        return (block_table[pos // self.block_tokens] * self.block_tokens + pos % self.block_tokens).to(self.device)

    def write(self, layer: int, block_table: torch.Tensor, start: int, k: torch.Tensor, v: torch.Tensor,
              slots: torch.Tensor | None = None) -> None:
        """Stores K and V ([n, heads, head_dim], any float dtype, rounded to the cache's) at positions
        [start, start + n). The positions must lie inside the table's blocks."""
        n = k.shape[0]
        if (start + n) > block_table.numel() * self.block_tokens:
            raise IndexError(f"positions up to {start + n} exceed the table's {block_table.numel()} blocks")
        s = self.slots(block_table, start, n) if slots is None else slots
        self._flat(self.k_layers[layer]).index_copy_(0, s, k.to(self.dtype))
        self._flat(self.v_layers[layer]).index_copy_(0, s, v.to(self.dtype))

    def gather(self, layer: int, block_table: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of positions [0, length): [length, heads, head_dim] in the cache's dtype (a copy)."""
        nb = self.blocks_for(length)
        if nb > block_table.numel():
            raise IndexError(f"length {length} needs {nb} blocks, the table has {block_table.numel()}")
        ids = block_table[:nb].to(self.device)
        k = self.k_layers[layer].index_select(0, ids).view(-1, self.num_kv_heads, self.head_dim)[:length]
        v = self.v_layers[layer].index_select(0, ids).view(-1, self.num_kv_heads, self.head_dim)[:length]
        return k, v

    def load_dense(self, block_table: torch.Tensor, kv: np.ndarray | torch.Tensor) -> None:
        """Writes a dense KV array [L, 2, T, H, D] (e.g. a codec roundtrip's output) at positions [0, T)."""
        kv_t = torch.as_tensor(kv)
        for layer in range(self.num_layers):
            self.write(layer, block_table, 0, kv_t[layer, 0].to(self.device), kv_t[layer, 1].to(self.device))

    def dump_dense(self, block_table: torch.Tensor, length: int) -> np.ndarray:
        """The sequence's KV as float32 [L, 2, T, H, D] (the layout `kvtctl codec eval --in` reads)."""
        out = np.empty((self.num_layers, 2, length, self.num_kv_heads, self.head_dim), dtype=np.float32)
        for layer in range(self.num_layers):
            k, v = self.gather(layer, block_table, length)
            out[layer, 0] = k.float().cpu().numpy()
            out[layer, 1] = v.float().cpu().numpy()
        return out


class BlockAllocator:
    """Hands out block ids of one cache, lowest first. Not thread-safe."""

    def __init__(self, num_blocks: int) -> None:
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def free(self) -> int:
        return len(self._free)

    def take(self, n: int) -> torch.Tensor:
        if n > len(self._free):
            raise MemoryError(f"{n} blocks wanted, {len(self._free)} free")
        ids = [self._free.pop() for _ in range(n)]
        return torch.tensor(ids, dtype=torch.int64)

    def give_back(self, block_table: torch.Tensor) -> None:
        self._free.extend(int(b) for b in reversed(block_table.tolist()))
