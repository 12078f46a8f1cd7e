"""kvt_engine.tp_accuracy: the row-parallel split and the AllReduce it sums through (no model file needed)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kvt_engine.tp_accuracy import ShardedAllReduce, parse_width, row_parallel


def test_width_names() -> None:
    assert parse_width("raw") == ((0, 0), False)
    assert parse_width("8") == ((8, 8), False)
    assert parse_width("4/8") == ((4, 8), False)
    assert parse_width("2s") == ((2, 2), True)
    with pytest.raises(ValueError):
        parse_width("four")


class _ExactSum:
    """A stand-in reduce: the float64 sum of the partials, so only the split is under test."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.seen: list[int] = []

    def __call__(self, partials: list[np.ndarray]) -> np.ndarray:
        self.seen.append(len(partials))
        return np.sum([p.astype(np.float64) for p in partials], axis=0).astype(np.float32)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_the_row_parallel_split_sums_to_the_unsharded_product(world: int) -> None:
    g = torch.Generator().manual_seed(world)
    x, w = torch.randn(5, 576, generator=g), torch.randn(64, 576, generator=g)
    reduce = _ExactSum(world)
    got = row_parallel(reduce)(x, w)
    assert reduce.seen == [world]
    assert torch.allclose(got, F.linear(x, w), rtol=1e-5, atol=1e-4)


def test_the_real_allreduce_is_identical_on_every_rank_and_quantizes_by_width() -> None:
    if not os.environ.get("KVT_COLLECTIVE_LIB"):
        pytest.skip("no libkvt_collective.so (the Bazel suite carries it; or set KVT_COLLECTIVE_LIB)")
    reduce = ShardedAllReduce(world=2, group_size=128)
    try:
        rng = np.random.default_rng(1)
        parts = [rng.standard_normal(4096).astype(np.float32) for _ in range(2)]
        exact = parts[0].astype(np.float64) + parts[1]
        errors = {}
        for bits in [(0, 0), (8, 8), (4, 4)]:
            reduce.bits = bits
            got = reduce([p.copy() for p in parts])  # raises if the ranks' results differ
            errors[bits] = float(np.abs(got - exact).max())
        assert errors[(0, 0)] < 1e-5 < errors[(8, 8)] < errors[(4, 4)], errors
        assert reduce.calls == 3
    finally:
        reduce.close()
