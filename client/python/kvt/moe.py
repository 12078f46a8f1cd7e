"""MoE Dispatch and Combine for expert parallelism, over kvt's collective library (the C ABI of
collective/c_api.h; docs/COLLECTIVES.md, "MoE Dispatch and Combine").

Experts are split evenly over the ranks (expert e lives on rank e // (num_experts // world_size)). `dispatch`
sends each token once to every rank that holds one of its top-k experts, FP8 E4M3 with per-group scales by
default; `combine` brings back, for every token, the weighted sum of its experts' outputs (fp32 sums in a fixed
order, so the result is deterministic)::

    import kvt.moe
    with kvt.moe.ExpertAllToAll(rank, world, hidden=7168, topk=8, num_experts=256, store=store,
                                backend="cuda", dtype=torch.bfloat16) as ep:
        d = ep.dispatch(tokens, topk_ids, topk_weights)      # CUDA tensors, on the current stream
        expert_out = run_experts(d.rows, d.slot_expert, d.slot_weight)   # [rows, topk, hidden]
        out = ep.combine(d, expert_out)                      # [num_tokens, hidden]
        ep.synchronize()                                     # a NaN, bad routing, a silent peer: raised here

Backends: "tcp" and "ucx" take float32 numpy arrays (or CPU tensors) and block; each received row lists its
slots (`slot_offsets`), and expert outputs come one per slot, [num_slots, hidden]. "cuda" takes CUDA tensors on
this rank's device, enqueues on the current stream and never waits on the host; its buffers are sized at
creation for `max_tokens` tokens a rank, rows come at a fixed stride (rows from rank r at r * max_tokens + i for
i < counts[r]), and expert outputs come per top-k slot, [world * max_tokens, topk, hidden]. A result stays valid
until the second dispatch after it, so one micro-batch can be dispatched while the previous is combined; the CUDA
result's tensors view the exchange's buffers (they keep the exchange object alive, but `close` frees the buffers:
do not use them after it). In a CUDA graph, pair every dispatch with its combine: the combine's round trip is
what makes the next replay's dispatch into the same buffers safe.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import grpc
import numpy as np

from kvt.collective import (_BF16, _F16, _F32, _MoeResult, _MoeShape, Store, _bootstrap_config, _check, _describe,
                            _ms)
from kvt.errors import InvalidArgument, error_from_code

__all__ = ["Dispatched", "ExpertAllToAll"]

_QUANT = {"none": 0, "fp8": 1, "int": 2}


@dataclass
class Dispatched:
    """What this rank received from one dispatch; valid until the second dispatch after it.

    Host backends (numpy, copies): `rows` [num_rows, hidden] float32, rank-major (`rank_offsets[r]` to
    `rank_offsets[r + 1]` came from rank r); `source_rank`, `source_index` [num_rows]; each row's slots
    `slot_offsets[row]` to `slot_offsets[row + 1]` in `slot_expert` (local expert id) and `slot_weight`.
    CUDA (torch tensors viewing the exchange's buffers): `rows` [world * max_tokens, hidden] in the exchange's
    dtype, `source_index` [world * max_tokens], `slot_expert` / `slot_weight` [world * max_tokens, topk] (-1 and
    0 where the expert is on another rank), `counts` [world] rows received from each rank.
    """

    rows: Any
    source_index: Any
    slot_expert: Any
    slot_weight: Any
    source_rank: Any = None
    slot_offsets: Any = None
    rank_offsets: Any = None
    counts: Any = None
    _result: Optional[_MoeResult] = None


class ExpertAllToAll:
    """A group of `world_size` ranks exchanging tokens for experts; this process is `rank`. Collective to
    create and to close. Bootstrap as `kvt.collective.Communicator` (`peers` or `store`); the shape
    (`hidden`, `topk`, `num_experts`), `quant` ("fp8", "none", or "int" on host backends with `bits`,
    `group_size`, `spike_reserve`), and for "cuda" `max_tokens` and `dtype` must be the same on every rank."""

    def __init__(self, rank: int, world_size: int, *, hidden: int, topk: int, num_experts: int,
                 backend: str = "tcp", peers: Optional[Sequence[str]] = None, store: Optional[Store] = None,
                 host: str = "127.0.0.1", prefix: str = "kvt-moe", device: Optional[int] = None,
                 timeout: float = 30.0, quant: str = "fp8", bits: int = 8, group_size: int = 128,
                 spike_reserve: bool = False, max_tokens: int = 128, dtype: Any = None,
                 ucx_tls: str = "", ucx_net_devices: str = "") -> None:
        self._moe: Optional[int] = None
        if quant not in _QUANT:
            raise InvalidArgument(f"quant must be one of {sorted(_QUANT)}, got {quant!r}")
        for name, value in (("hidden", hidden), ("topk", topk), ("num_experts", num_experts),
                            ("max_tokens", max_tokens), ("group_size", group_size)):
            if not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"{name} must be a positive int, got {value!r}")
        dtype_code = _F32
        if backend == "cuda":
            import torch
            codes = {torch.float32: _F32, torch.bfloat16: _BF16, torch.float16: _F16}
            dtype = torch.bfloat16 if dtype is None else dtype
            if dtype not in codes:
                raise InvalidArgument(f"dtype must be float32, bfloat16 or float16, got {dtype}")
            dtype_code = codes[dtype]
        self._dtype = dtype
        lib, config = _bootstrap_config(rank, world_size, backend=backend, peers=peers, store=store, host=host,
                                        prefix=prefix, device=device, timeout=timeout, ucx_tls=ucx_tls,
                                        ucx_net_devices=ucx_net_devices)
        shape = _MoeShape(hidden=hidden, topk=topk, num_experts=num_experts, quant=_QUANT[quant], bits=bits,
                          group_size=group_size, spike_reserve=1 if spike_reserve else 0, max_tokens=max_tokens,
                          dtype=dtype_code)
        moe = ctypes.c_void_p()
        # kvt_coll_moe_create takes the listener, whatever it returns.
        _check(lib, lib.kvt_coll_moe_create(ctypes.byref(config), ctypes.byref(shape), ctypes.byref(moe)),
               f"create ({backend})")
        self._lib = lib
        self._moe = moe.value
        self.backend, self.rank, self.world_size = backend, rank, world_size
        self.hidden, self.topk, self.num_experts, self.max_tokens = hidden, topk, num_experts, max_tokens
        self.device: Optional[int] = config.device if backend == "cuda" else None
        if backend == "cuda" and self.device is not None and self.device < 0:
            import torch
            self.device = rank % torch.cuda.device_count()

    def dispatch(self, tokens: Any, topk_experts: Any, topk_weights: Any,
                 timeout: Optional[float] = None) -> Dispatched:
        """Sends `tokens` [n, hidden] to the ranks of their experts, `topk_experts` [n, topk] (int32 ids in
        [0, num_experts), -1 for an unused slot) weighted by `topk_weights` [n, topk] (float32)."""
        moe = self._live()
        n = self._check_rows("tokens", tokens, self.hidden)
        if self._check_rows("topk_experts", topk_experts, self.topk, ids=True) != n or \
                self._check_rows("topk_weights", topk_weights, self.topk, weights=True) != n:
            raise InvalidArgument(f"tokens has {n} rows; topk_experts and topk_weights must have as many")
        if self.backend == "cuda" and n > self.max_tokens:
            raise InvalidArgument(f"{n} tokens, more than max_tokens={self.max_tokens} this exchange was made for")
        result = _MoeResult()
        _check(self._lib, self._lib.kvt_coll_moe_dispatch(moe, _ptr(tokens), _ptr(topk_experts), _ptr(topk_weights),
                                                         n, _ms(timeout), self._stream(), ctypes.byref(result)),
               "dispatch")
        if self.backend == "cuda":
            rows = self.world_size * self.max_tokens
            return Dispatched(rows=self._device_view(result.rows, (rows, self.hidden), self._dtype),
                              source_index=self._device_view(result.source_index, (rows,), "int32"),
                              slot_expert=self._device_view(result.slot_expert, (rows, self.topk), "int32"),
                              slot_weight=self._device_view(result.slot_weight, (rows, self.topk), "float32"),
                              counts=self._device_view(result.counts, (self.world_size,), "int32"), _result=result)
        rows, slots = result.num_rows, result.num_slots
        return Dispatched(rows=_host_copy(result.rows, np.float32, rows * self.hidden).reshape(rows, self.hidden),
                          source_index=_host_copy(result.source_index, np.int32, rows),
                          slot_expert=_host_copy(result.slot_expert, np.int32, slots),
                          slot_weight=_host_copy(result.slot_weight, np.float32, slots),
                          source_rank=_host_copy(result.source_rank, np.int32, rows),
                          slot_offsets=_host_copy(result.slot_offsets, np.uint64, rows + 1),
                          rank_offsets=_host_copy(result.rank_offsets, np.uint64, self.world_size + 1),
                          _result=result)

    def combine(self, dispatched: Dispatched, expert_out: Any, out: Any = None,
                timeout: Optional[float] = None) -> Any:
        """Sends each row's weighted expert outputs back to its token's rank and returns (or fills `out`, [n of
        the dispatch, hidden]) every token's sum. `expert_out`: [num_slots, hidden] float32 on host backends;
        [world * max_tokens, topk, hidden] of the exchange's dtype on "cuda"."""
        moe = self._live()
        if dispatched._result is None:
            raise InvalidArgument("dispatched must be what this exchange's dispatch returned")
        n = dispatched._result.num_tokens
        if self.backend == "cuda":
            import torch
            want = (self.world_size * self.max_tokens, self.topk, self.hidden)
            self._check_cuda("expert_out", expert_out, want, self._dtype)
            if out is None:
                out = torch.empty((n, self.hidden), dtype=self._dtype, device=f"cuda:{self.device}")
            self._check_cuda("out", out, (n, self.hidden), self._dtype)
        else:
            slots = dispatched._result.num_slots
            expert_out = _host_array("expert_out", expert_out, (slots, self.hidden))
            out = np.empty((n, self.hidden), dtype=np.float32) if out is None else out
            out = _host_array("out", out, (n, self.hidden), writable=True)
        _check(self._lib, self._lib.kvt_coll_moe_combine(moe, ctypes.byref(dispatched._result), _ptr(expert_out),
                                                        _ptr(out), _ms(timeout), self._stream()), "combine")
        return out

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """CUDA: waits for the current stream and raises what the GPUs recorded (a non-finite token or weight,
        a bad expert id, a silent or disagreeing peer). Host backends: nothing to wait for."""
        _check(self._lib, self._lib.kvt_coll_moe_synchronize(self._live(), self._stream(), _ms(timeout)),
               "synchronize")

    def close(self) -> None:
        """Collective: every rank closes."""
        if self._moe is not None:
            self._lib.kvt_coll_moe_destroy(self._moe)
            self._moe = None

    def __enter__(self) -> "ExpertAllToAll":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_moe", None) is not None:
            self.close()

    def _live(self) -> int:
        if self._moe is None:
            raise error_from_code(grpc.StatusCode.FAILED_PRECONDITION, "this exchange is closed")
        return self._moe

    def _stream(self) -> Optional[int]:
        if self.backend != "cuda":
            return None
        import torch
        return torch.cuda.current_stream(self.device).cuda_stream

    def _check_rows(self, name: str, a: Any, width: int, ids: bool = False, weights: bool = False) -> int:
        """Rows of a [n, width] input after checking its kind, dtype, layout and device."""
        if self.backend == "cuda":
            import torch
            dtype = torch.int32 if ids else (torch.float32 if weights else self._dtype)
            if not isinstance(a, torch.Tensor) or a.dim() != 2:
                raise InvalidArgument(f"{name} must be a 2-D CUDA tensor, got {_describe(a)}")
            self._check_cuda(name, a, (a.shape[0], width), dtype)
            return int(a.shape[0])
        dtype = np.int32 if ids else np.float32
        a = _host_array(name, a, None, dtype=dtype)
        if a.ndim != 2 or a.shape[1] != width:
            raise InvalidArgument(f"{name} must be [n, {width}], got {_describe(a)}")
        return int(a.shape[0])

    def _check_cuda(self, name: str, t: Any, shape: Any, dtype: Any) -> None:
        import torch
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda" or t.device.index != self.device:
            raise InvalidArgument(f"{name} must be a CUDA tensor on device {self.device}, got {_describe(t)}")
        if tuple(t.shape) != tuple(shape) or t.dtype != dtype or not t.is_contiguous():
            raise InvalidArgument(f"{name} must be a contiguous {dtype} tensor of shape {tuple(shape)}, "
                                  f"got {_describe(t)}")

    def _device_view(self, pointer: Optional[int], shape: Any, dtype: Any) -> Any:
        """A torch tensor over device memory the exchange owns (through __cuda_array_interface__; bf16, which
        has no typestr there, is viewed as 2-byte integers and reinterpreted)."""
        import torch
        typestr = {"int32": "<i4", "float32": "<f4", torch.float32: "<f4", torch.float16: "<f2",
                   torch.bfloat16: "<i2"}[dtype]
        with torch.cuda.device(self.device):
            view = torch.as_tensor(_DeviceArray(pointer or 0, tuple(shape), typestr, owner=self),
                                   device=f"cuda:{self.device}")
        return view.view(torch.bfloat16) if dtype is torch.bfloat16 else view


class _DeviceArray:
    """Device memory of an exchange, as torch.as_tensor takes it; the tensor keeps this object, and so the
    exchange, alive (an exchange that is garbage while its views live would free their memory under them)."""

    def __init__(self, pointer: int, shape: Any, typestr: str, owner: Any) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (pointer, False),
                                         "version": 2}


def _ptr(a: Any) -> int:
    if isinstance(a, np.ndarray):
        return a.ctypes.data
    return a.data_ptr()


def _host_array(name: str, a: Any, shape: Any, dtype: Any = np.float32, writable: bool = False) -> np.ndarray:
    """`a` as a C-contiguous numpy array of `dtype` (a CPU tensor is viewed, not copied), shape-checked."""
    if not isinstance(a, np.ndarray):
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None or not isinstance(a, torch.Tensor) or a.device.type != "cpu":
            raise InvalidArgument(f"{name} must be a numpy array or a CPU tensor on this backend, got {_describe(a)}")
        a = a.numpy()
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise InvalidArgument(f"{name} must be a C-contiguous {np.dtype(dtype).name} array, got {_describe(a)}")
    if writable and not a.flags.writeable:
        raise InvalidArgument(f"{name} is read-only")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise InvalidArgument(f"{name} must have shape {tuple(shape)}, got {tuple(a.shape)}")
    return a


def _host_copy(pointer: Optional[int], dtype: Any, count: int) -> np.ndarray:
    if count == 0 or not pointer:
        return np.zeros(count, dtype=dtype)
    return np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(np.ctypeslib.as_ctypes_type(dtype))),
                                 shape=(count,)).copy()
