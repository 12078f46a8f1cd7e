"""kvt's collectives from Python: quantized AllReduce for tensor-parallel engines (docs/COLLECTIVES.md).

The C++ communicators (two-step AllReduce with 2..8-bit groups, the Flash Communication scheme) come through
libkvt_collective.so's C ABI (collective/c_api.h), loaded with ctypes, the way vLLM loads NCCL (pynccl):

    import kvt.collective as kc
    store = torch.distributed.TCPStore(host, port, world_size, rank == 0)      # or any object with set/get
    with kc.Communicator(rank, world_size, store=store, backend="cuda") as comm:
        comm.all_reduce(x, bits=(4, 8))          # x: a CUDA tensor (fp32/bf16/fp16), reduced in place on the
        ...                                      # current stream, like torch.distributed.all_reduce
        comm.synchronize()                       # what the GPUs found (NaN, a silent peer) raises here

Backends: "tcp" and "ucx" reduce host float32 buffers (numpy arrays or CPU tensors), each call blocking; "cuda"
reduces device tensors of the GPUs of one host through each other's memory, enqueued on the caller's stream.
Every rank calls the same collectives in the same order with the same shapes and options. Errors are
kvt.KvtError subclasses (InvalidArgument for bad input, Unavailable for a peer that is gone, DeadlineExceeded for
one that is silent); after a collective fails the group is out of step: close it and make a new one.

The library is found at $KVT_COLLECTIVE_LIB, else beside this package (kvt/_lib/), else on the loader's path.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, List, Optional, Protocol, Sequence, Tuple, Union

import grpc
import numpy as np

from kvt.errors import InvalidArgument, error_from_code

__all__ = ["Communicator", "Store", "default_one_shot_bytes", "library_path"]

_ABI_VERSION = 2
_BACKENDS = {"tcp": 0, "ucx": 1, "cuda": 2}
_F32, _BF16, _F16 = 0, 1, 2
_CODES = {c.value[0]: c for c in grpc.StatusCode}


class Store(Protocol):
    """What the bootstrap needs of a store: torch.distributed's Store (TCPStore, FileStore) has both."""

    def set(self, key: str, value: Union[str, bytes]) -> None: ...

    def get(self, key: str) -> bytes: ...


class _Config(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("peers", ctypes.c_char_p),
        ("listener", ctypes.c_void_p),
        ("bootstrap_timeout_ms", ctypes.c_uint32),
        ("ucx_tls", ctypes.c_char_p),
        ("ucx_net_devices", ctypes.c_char_p),
        ("device", ctypes.c_int32),
        ("workspace_bytes", ctypes.c_uint64),
        ("nccl_library", ctypes.c_char_p),
        ("one_shot_bytes", ctypes.c_int64),
    ]


class _Options(ctypes.Structure):
    _fields_ = [
        ("step1_bits", ctypes.c_int32),
        ("step2_bits", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("spike_reserve", ctypes.c_int32),
        ("chunk_bytes", ctypes.c_uint64),
        ("timeout_ms", ctypes.c_uint32),
    ]


class _MoeShape(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32) for name in ("hidden", "topk", "num_experts", "quant", "bits", "group_size",
                                                    "spike_reserve", "max_tokens", "dtype")]


class _MoeResult(ctypes.Structure):
    _fields_ = [
        ("sequence", ctypes.c_uint64),
        ("num_rows", ctypes.c_int64),
        ("num_slots", ctypes.c_int64),
        ("rows", ctypes.c_void_p),
        ("source_rank", ctypes.c_void_p),
        ("source_index", ctypes.c_void_p),
        ("slot_offsets", ctypes.c_void_p),
        ("slot_expert", ctypes.c_void_p),
        ("slot_weight", ctypes.c_void_p),
        ("rank_offsets", ctypes.c_void_p),
        ("counts", ctypes.c_void_p),
        ("max_tokens", ctypes.c_int32),
        ("num_tokens", ctypes.c_int32),
    ]


def library_path() -> str:
    """Where libkvt_collective.so is taken from: $KVT_COLLECTIVE_LIB, kvt/_lib/, else the loader's search."""
    given = os.environ.get("KVT_COLLECTIVE_LIB")
    if given:
        return given
    bundled = Path(__file__).parent / "_lib" / "libkvt_collective.so"
    return str(bundled) if bundled.exists() else "libkvt_collective.so"


_lib: Optional[ctypes.CDLL] = None


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise error_from_code(grpc.StatusCode.FAILED_PRECONDITION,
                              f"cannot load kvt's collective library {path!r} ({e}): build it with "
                              "`bazel build //collective:libkvt_collective.so` and set KVT_COLLECTIVE_LIB") from e
    vp, i32, u32, u64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64
    lib.kvt_coll_abi_version.restype = u32
    lib.kvt_coll_last_error.restype = ctypes.c_char_p
    lib.kvt_coll_listen.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp), ctypes.POINTER(i32)]
    lib.kvt_coll_listener_close.argtypes = [vp]
    lib.kvt_coll_listener_close.restype = None
    lib.kvt_coll_create.argtypes = [ctypes.POINTER(_Config), ctypes.POINTER(vp)]
    lib.kvt_coll_default_one_shot_bytes.argtypes = [i32, u64]
    lib.kvt_coll_default_one_shot_bytes.restype = ctypes.c_int64
    lib.kvt_coll_destroy.argtypes = [vp]
    lib.kvt_coll_destroy.restype = None
    for name in ("kvt_coll_rank", "kvt_coll_world_size", "kvt_coll_device"):
        getattr(lib, name).argtypes = [vp]
        getattr(lib, name).restype = i32
    lib.kvt_coll_all_reduce.argtypes = [vp, vp, vp, u64, i32, ctypes.POINTER(_Options), vp]
    lib.kvt_coll_synchronize.argtypes = [vp, vp, u32]
    lib.kvt_coll_moe_create.argtypes = [ctypes.POINTER(_Config), ctypes.POINTER(_MoeShape), ctypes.POINTER(vp)]
    lib.kvt_coll_moe_destroy.argtypes = [vp]
    lib.kvt_coll_moe_destroy.restype = None
    lib.kvt_coll_moe_dispatch.argtypes = [vp, vp, vp, vp, i32, u32, vp, ctypes.POINTER(_MoeResult)]
    lib.kvt_coll_moe_combine.argtypes = [vp, ctypes.POINTER(_MoeResult), vp, vp, u32, vp]
    lib.kvt_coll_moe_synchronize.argtypes = [vp, vp, u32]
    if lib.kvt_coll_abi_version() != _ABI_VERSION:
        raise error_from_code(grpc.StatusCode.FAILED_PRECONDITION,
                              f"{path} speaks C ABI {lib.kvt_coll_abi_version()}, this kvt package {_ABI_VERSION}: "
                              "use the library built from the same kvt checkout")
    _lib = lib
    return lib


def default_one_shot_bytes(world_size: int, workspace_bytes: int = 0) -> int:
    """The one-shot threshold (bytes) that `one_shot_bytes=-1` means for `world_size` ranks with
    `workspace_bytes` each (0: the default workspace)."""
    return int(_library().kvt_coll_default_one_shot_bytes(world_size, workspace_bytes))


def _check(lib: ctypes.CDLL, code: int, what: str) -> None:
    if code != 0:
        message = (lib.kvt_coll_last_error() or b"").decode(errors="replace")
        raise error_from_code(_CODES.get(code, grpc.StatusCode.UNKNOWN), f"{what}: {message}")


def _ms(seconds: Optional[float]) -> int:
    if seconds is None:
        return 0
    if not seconds > 0:
        raise InvalidArgument(f"timeout must be positive seconds, got {seconds}")
    return max(1, min(int(seconds * 1000), 2**32 - 1))


class Communicator:
    """A group of `world_size` ranks, this process being `rank`. Collective to create and to close.

    Bootstrap: `peers` (every rank's "host:port", rank order, each rank listening on its own entry), or `store`
    (each rank listens on a free port of `host` and publishes it under `prefix`; with a store that has `add`,
    as torch's do, every group made on one prefix gets keys of its own; without, use a prefix per group). `device`: the CUDA device
    of this rank ("cuda" backend; None: the current torch device, else rank % devices). `nccl_library`: an
    NCCL the CUDA backend may route small or unquantized calls to (the same on every rank; "" never).
    `one_shot_bytes` (CUDA backend): calls of at most this many bytes take the one-shot round, one kernel in which
    every rank pushes its encoded tensor to every other (its result is that of an unquantized second step); -1:
    kvt's default for the world (`default_one_shot_bytes`), 0: never. The same on every rank.
    """

    def __init__(self, rank: int, world_size: int, *, backend: str = "tcp", peers: Optional[Sequence[str]] = None,
                 store: Optional[Store] = None, host: str = "127.0.0.1", prefix: str = "kvt-collective",
                 device: Optional[int] = None, timeout: float = 30.0, workspace_bytes: int = 0,
                 nccl_library: str = "", ucx_tls: str = "", ucx_net_devices: str = "",
                 one_shot_bytes: int = -1) -> None:
        self._comm: Optional[int] = None
        if one_shot_bytes < -1:
            raise InvalidArgument(f"one_shot_bytes must be -1 (the default), 0 (never) or a byte count, "
                                  f"got {one_shot_bytes}")
        lib, config = _bootstrap_config(rank, world_size, backend=backend, peers=peers, store=store, host=host,
                                        prefix=prefix, device=device, timeout=timeout, ucx_tls=ucx_tls,
                                        ucx_net_devices=ucx_net_devices, workspace_bytes=workspace_bytes,
                                        nccl_library=nccl_library.encode(), one_shot_bytes=one_shot_bytes)
        comm = ctypes.c_void_p()
        # kvt_coll_create takes the listener, whatever it returns.
        _check(lib, lib.kvt_coll_create(ctypes.byref(config), ctypes.byref(comm)), f"create ({backend})")
        self._lib = lib
        self._comm = comm.value
        self.backend = backend
        self.rank = rank
        self.world_size = world_size
        self.device: Optional[int] = lib.kvt_coll_device(self._comm) if backend == "cuda" else None

    def all_reduce(self, tensor: Any, *, bits: Union[int, Tuple[int, int]] = 8, group_size: int = 128,
                   spike_reserve: bool = False, chunk_bytes: int = 0, timeout: Optional[float] = None,
                   out: Any = None) -> Any:
        """Sums `tensor` over the ranks into `out` (default: `tensor` itself) and returns it.

        `bits`: the code width of both steps, or (reduce-scatter, all-gather) widths; 0 sends a step
        unquantized. Host backends take float32 numpy arrays or CPU tensors, contiguous, and return when done.
        The CUDA backend takes CUDA tensors (float32, bfloat16, float16) on this rank's device and enqueues the
        reduction on the current stream; `synchronize` reports what the GPUs found.
        """
        comm = self._live()
        if isinstance(bits, int):
            step1, step2 = bits, bits
        elif isinstance(bits, tuple) and len(bits) == 2 and all(isinstance(b, int) for b in bits):
            step1, step2 = bits
        else:
            raise InvalidArgument(f"bits must be an int or a (reduce-scatter, all-gather) pair of ints, got {bits!r}")
        options = _Options(step1_bits=step1, step2_bits=step2, group_size=group_size,
                           spike_reserve=1 if spike_reserve else 0, chunk_bytes=chunk_bytes, timeout_ms=_ms(timeout))
        target = tensor if out is None else out
        count, dtype, src, dst, stream = self._buffers(tensor, target)
        _check(self._lib, self._lib.kvt_coll_all_reduce(comm, src, dst, count, dtype, ctypes.byref(options), stream),
               "all_reduce")
        return target

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """CUDA: waits for the current stream and raises what the GPUs recorded since the last call (a
        non-finite value, a silent or disagreeing peer). Host backends: nothing to wait for."""
        comm = self._live()
        stream = None
        if self.backend == "cuda":
            import torch
            stream = torch.cuda.current_stream(self.device).cuda_stream
        _check(self._lib, self._lib.kvt_coll_synchronize(comm, stream, _ms(timeout)), "synchronize")

    def close(self) -> None:
        """Collective: every rank closes (the CUDA backend unmaps its peers' memory after a goodbye)."""
        if self._comm is not None:
            self._lib.kvt_coll_destroy(self._comm)
            self._comm = None

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_comm", None) is not None:
            self.close()

    def _live(self) -> int:
        if self._comm is None:
            raise error_from_code(grpc.StatusCode.FAILED_PRECONDITION, "this communicator is closed")
        return self._comm

    def _buffers(self, tensor: Any, target: Any) -> Tuple[int, int, int, int, Optional[int]]:
        """(count, dtype code, in pointer, out pointer, stream) of a call, after checking both buffers."""
        if isinstance(tensor, np.ndarray) or isinstance(target, np.ndarray):
            if self.backend == "cuda":
                raise InvalidArgument("the cuda backend reduces CUDA tensors; numpy arrays go through tcp or ucx")
            for name, a in (("tensor", tensor), ("out", target)):
                if not isinstance(a, np.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous:
                    raise InvalidArgument(f"{name} must be a C-contiguous float32 numpy array (like the other), "
                                          f"got {_describe(a)}")
                if not a.flags.writeable and a is target:
                    raise InvalidArgument("out is read-only")
            if tensor.shape != target.shape:
                raise InvalidArgument(f"out has shape {target.shape}, tensor {tensor.shape}")
            return tensor.size, _F32, tensor.ctypes.data, target.ctypes.data, None
        try:
            import torch
        except ImportError:
            raise InvalidArgument(f"all_reduce takes numpy arrays (or torch tensors, with torch installed), got "
                                  f"{_describe(tensor)}") from None
        if not isinstance(tensor, torch.Tensor) or not isinstance(target, torch.Tensor):
            raise InvalidArgument(f"all_reduce takes numpy arrays or torch tensors, got {_describe(tensor)}")
        if tensor.shape != target.shape or tensor.dtype != target.dtype or tensor.device != target.device:
            raise InvalidArgument(f"out ({_describe(target)}) must match tensor ({_describe(tensor)})")
        if not tensor.is_contiguous() or not target.is_contiguous():
            raise InvalidArgument("tensor and out must be contiguous")
        codes = {torch.float32: _F32, torch.bfloat16: _BF16, torch.float16: _F16}
        if tensor.dtype not in codes:
            raise InvalidArgument(f"dtype must be float32, bfloat16 or float16, got {tensor.dtype}")
        if self.backend == "cuda":
            if tensor.device.type != "cuda" or tensor.device.index != self.device:
                raise InvalidArgument(f"the cuda backend of device {self.device} got a tensor on {tensor.device}")
            if target.data_ptr() != tensor.data_ptr() and _overlap(tensor, target):
                raise InvalidArgument("out overlaps tensor without being it")
            # The current stream's handle; 0 (PyTorch's default stream) is the C ABI's legacy default stream.
            stream = torch.cuda.current_stream(tensor.device).cuda_stream
            return tensor.numel(), codes[tensor.dtype], tensor.data_ptr(), target.data_ptr(), stream
        if tensor.device.type != "cpu" or tensor.dtype != torch.float32:
            raise InvalidArgument(f"the {self.backend} backend reduces float32 CPU tensors, got {_describe(tensor)}")
        return tensor.numel(), _F32, tensor.data_ptr(), target.data_ptr(), None


def _bootstrap_config(rank: int, world_size: int, *, backend: str, peers: Optional[Sequence[str]],
                      store: Optional[Store], host: str, prefix: str, device: Optional[int], timeout: float,
                      ucx_tls: str, ucx_net_devices: str, **cuda: Any) -> Tuple[ctypes.CDLL, "_Config"]:
    """Checks the group's arguments, listens and publishes this rank's address when bootstrapping from a store,
    and returns the library and the config to create from (its listener is consumed by the create call)."""
    if backend not in _BACKENDS:
        raise InvalidArgument(f"backend must be one of {sorted(_BACKENDS)}, got {backend!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgument(f"rank {rank} is not in a world of {world_size}")
    if (peers is None) == (store is None):
        raise InvalidArgument("give exactly one of peers (every rank's host:port) and store")
    if peers is not None and len(peers) != world_size:
        raise InvalidArgument(f"peers names {len(peers)} ranks, world_size is {world_size}")
    bootstrap_ms = _ms(timeout)  # a bad timeout is refused before anything is bound or published
    if backend == "cuda" and device is None:
        device = _current_torch_device()
    lib = _library()
    listener = ctypes.c_void_p()
    try:
        if store is not None:
            port = ctypes.c_int32()
            _check(lib, lib.kvt_coll_listen(host.encode(), ctypes.byref(listener), ctypes.byref(port)), "listen")
            keys = _group_keys(store, prefix, world_size)
            store.set(keys[rank], f"{host}:{port.value}")
            peers = [_text(store.get(k)) for k in keys]
        assert peers is not None
        return lib, _Config(abi_version=_ABI_VERSION, backend=_BACKENDS[backend], rank=rank,
                            peers=",".join(peers).encode(), listener=listener.value, bootstrap_timeout_ms=bootstrap_ms,
                            ucx_tls=ucx_tls.encode(), ucx_net_devices=ucx_net_devices.encode(),
                            device=-1 if device is None else device, **cuda)
    except BaseException:
        if listener.value:
            lib.kvt_coll_listener_close(listener)
        raise


def _group_keys(store: Store, prefix: str, world_size: int) -> List[str]:
    """The store keys of this group's addresses. With a store that counts (torch's `add`), each group made on
    the same prefix gets keys of its own, so a second group never reads the first one's ports: the ranks'
    joins number 1..W for the first group, W+1..2W for the next, and so on."""
    add = getattr(store, "add", None)
    generation = (int(add(f"{prefix}/joins", 1)) - 1) // world_size if callable(add) else 0
    return [f"{prefix}/{generation}/{r}" for r in range(world_size)]


def _overlap(a: Any, b: Any) -> bool:
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def _text(value: Union[str, bytes]) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _describe(a: Any) -> str:
    dtype = getattr(a, "dtype", None)
    shape = tuple(getattr(a, "shape", ()))
    device = getattr(a, "device", None)
    return f"{type(a).__name__}(dtype={dtype}, shape={shape}{'' if device is None else f', device={device}'})"


def _current_torch_device() -> Optional[int]:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.current_device() if torch.cuda.is_available() else None

