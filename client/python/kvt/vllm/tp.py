"""Which tensor-parallel ranks of a prefill instance send which heads to which ranks of a decode instance.

vLLM shards a layer's KV heads over its TP ranks: with H heads of the model and T ranks, rank r holds heads
[r H / T, (r + 1) H / T) when T divides H, and when T > H (the heads are replicated) the one head r H / T. Each
(prefill rank, decode rank) pair whose heads overlap is one kvt request per layer, id
`"<transfer>/p<prefill rank>d<decode rank>/L<layer>"`: kvtd writes the heads both regions hold (its M -> N head
re-slicing, docs/DAEMON.md "Tensor parallelism"). A head that several prefill ranks hold (replicated) is sent by
the lowest of them only, so that both instances, computing the same pairs, offer exactly what is expected.

    plan = TpPlan(prefill_size=2, decode_size=1, total_heads=8)
    plan.pairs()            # [(0, 0), (1, 0)]: decode rank 0 expects from prefill ranks 0 and 1
    plan.heads(Side.PREFILL, 1)  # (4, 8)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import List, Tuple

from kvt.client import Side


def head_range(rank: int, size: int, total_heads: int) -> Tuple[int, int]:
    """Heads [begin, end) of TP rank `rank` of `size` in vLLM's sharding of `total_heads` KV heads."""
    if size >= total_heads:
        head = rank * total_heads // size
        return head, head + 1
    return rank * total_heads // size, (rank + 1) * total_heads // size


@dataclass(frozen=True)
class TpPlan:
    prefill_size: int
    decode_size: int
    total_heads: int

    def __post_init__(self) -> None:
        for name in ("prefill_size", "decode_size", "total_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TpPlan.{name} must be a positive integer, got {value!r}")
        for name in ("prefill_size", "decode_size"):
            size = getattr(self, name)
            if size < self.total_heads and self.total_heads % size != 0:
                raise ValueError(f"a tensor-parallel size of {size} does not divide the model's "
                                 f"{self.total_heads} KV heads (vLLM would refuse it too)")
            if size > self.total_heads and size % self.total_heads != 0:
                raise ValueError(f"a tensor-parallel size of {size} is not a multiple of the model's "
                                 f"{self.total_heads} KV heads (vLLM would refuse it too)")

    def heads(self, side: Side, rank: int) -> Tuple[int, int]:
        if side not in (Side.PREFILL, Side.DECODE):
            raise ValueError(f"a tensor-parallel plan has a prefill and a decode side, not {side!r}")
        size = self.prefill_size if side is Side.PREFILL else self.decode_size
        if not 0 <= rank < size:
            raise ValueError(f"{side.name.lower()} rank {rank} is outside its tensor-parallel size {size}")
        return head_range(rank, size, self.total_heads)

    def _sender_of(self, head: int) -> int:
        """The lowest prefill rank holding `head`: head * T / H, exact when T > H (T is then a multiple of H)."""
        return head * self.prefill_size // self.total_heads

    @functools.cached_property
    def _pairs(self) -> Tuple[Tuple[int, int], ...]:
        out = set()
        for d in range(self.decode_size):
            begin, end = self.heads(Side.DECODE, d)
            for head in range(begin, end):
                out.add((self._sender_of(head), d))
        return tuple(sorted(out))

    def pairs(self) -> List[Tuple[int, int]]:
        """(prefill rank, decode rank) pairs with a request each, in order: every decode rank's heads come from
        exactly one prefill rank each. Worked out once a plan."""
        return list(self._pairs)

    def peers(self, side: Side, rank: int) -> List[int]:
        """The other instance's ranks this rank has a request with (prefill: decode ranks to offer to; decode:
        prefill ranks to expect from)."""
        self.heads(side, rank)  # range check
        if side is Side.PREFILL:
            return [d for p, d in self.pairs() if p == rank]
        return [p for p, d in self.pairs() if d == rank]


def request_id(transfer_id: str, prefill_rank: int, decode_rank: int, layer: int) -> str:
    return f"{transfer_id}/p{prefill_rank}d{decode_rank}/L{layer}"
