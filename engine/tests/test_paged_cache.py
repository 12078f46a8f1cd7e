"""Block tables: positions land in the blocks the table names, in token order, and nowhere else."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kvt_engine.paged_cache import BlockAllocator, PagedKvCache


def test_write_then_gather_through_a_shuffled_table_round_trips():
    cache = PagedKvCache.allocate(num_layers=2, num_blocks=8, block_tokens=4, num_kv_heads=2, head_dim=3)
    table = torch.tensor([5, 0, 7])
    k = torch.arange(11 * 6, dtype=torch.float32).view(11, 2, 3)
    cache.write(1, table, 0, k, -k)
    got_k, got_v = cache.gather(1, table, 11)
    torch.testing.assert_close(got_k.float(), k)
    torch.testing.assert_close(got_v.float(), -k)
    # Position 5 is block table[1] = 0, offset 1.
    torch.testing.assert_close(cache.k_layers[1][0, 1].float(), k[5])
    # Untouched: other blocks, the other layer, the tail of the last block.
    assert cache.k_layers[1][3].abs().sum() == 0
    assert cache.k_layers[0].abs().sum() == 0
    assert cache.k_layers[1][7, 3].abs().sum() == 0


def test_a_write_in_the_middle_touches_only_its_positions():
    cache = PagedKvCache.allocate(num_layers=1, num_blocks=4, block_tokens=4, num_kv_heads=1, head_dim=2)
    table = torch.tensor([2, 3])
    cache.write(0, table, 3, torch.ones(2, 1, 2), torch.ones(2, 1, 2))
    k, _ = cache.gather(0, table, 8)
    assert k[:, 0, 0].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]


def test_values_are_rounded_to_the_cache_dtype():
    cache = PagedKvCache.allocate(num_layers=1, num_blocks=1, block_tokens=2, num_kv_heads=1, head_dim=1)
    cache.write(0, torch.tensor([0]), 0, torch.tensor([[[1.0 + 2 ** -10]], [[3.0]]]), torch.zeros(2, 1, 1))
    k, _ = cache.gather(0, torch.tensor([0]), 2)
    assert k.dtype == torch.bfloat16 and k[0].item() == 1.0


def test_writes_past_the_table_are_refused():
    cache = PagedKvCache.allocate(num_layers=1, num_blocks=4, block_tokens=4, num_kv_heads=1, head_dim=2)
    with pytest.raises(IndexError):
        cache.write(0, torch.tensor([1]), 3, torch.ones(2, 1, 2), torch.ones(2, 1, 2))


def test_dense_dump_and_load_round_trip():
    cache = PagedKvCache.allocate(num_layers=2, num_blocks=6, block_tokens=4, num_kv_heads=2, head_dim=3)
    table = torch.tensor([4, 1, 2])
    kv = np.random.default_rng(0).standard_normal((2, 2, 9, 2, 3)).astype(np.float32)
    cache.load_dense(table, kv)
    back = cache.dump_dense(table, 9)
    np.testing.assert_array_equal(back, torch.from_numpy(kv).bfloat16().float().numpy())


def test_allocator_hands_out_distinct_blocks_and_takes_them_back():
    alloc = BlockAllocator(5)
    a, b = alloc.take(2), alloc.take(3)
    assert sorted(a.tolist() + b.tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(MemoryError):
        alloc.take(1)
    alloc.give_back(a)
    assert alloc.take(2).tolist() == a.tolist()
