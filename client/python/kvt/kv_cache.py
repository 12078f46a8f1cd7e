"""KvCache: a paged KV cache an engine allocates, views per layer, and registers with kvtd.

Host caches live in a POSIX shared-memory segment the daemon maps (numpy and torch views share it). CUDA caches
are one torch allocation on the GPU, registered through a CUDA IPC handle (the daemon's GPU path). Either way
the bytes are laid out as `layout` says, so K of layer l is a view at layout.tensor_offset(l, 0).

    with kvt.Client(sock) as client, kvt.KvCache.allocate(layout, device="cpu") as cache:
        cache.k(0)[...] = keys                       # torch view [blocks, tokens, heads, dim] (NHD)
        cache.register(client, "kv")
        ...                                          # offer / expect on region "kv"
    # leaving the block unregisters the region and releases the memory, then closes the client (the cache
    # unregisters through its client, so the client must outlive it: open the client first)

Thread-compatible: views may be used from any thread; register/unregister/close need external ordering.
"""
from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional, Tuple, Type

import numpy as np

from kvt.client import Client
from kvt.errors import FailedPrecondition, InvalidArgument, KvtError, NotFound, Unavailable
from kvt.layout import DType, KvLayout
from kvt.shm import ShmSegment

if TYPE_CHECKING:  # torch is optional: imported where a torch view or a CUDA cache is asked for
    import torch

_LOG = logging.getLogger("kvt")
_CUDA_IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)
_K, _V = 0, 1


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise FailedPrecondition("torch is not installed: torch views and CUDA caches need it "
                                 "(pip install torch, or use the numpy views of a host cache)") from None
    return torch


def _torch_dtype(dtype: DType) -> "torch.dtype":
    torch = _torch()
    return {DType.BF16: torch.bfloat16, DType.FP16: torch.float16, DType.FP32: torch.float32}[dtype]


def cuda_ipc_handle(tensor: "torch.Tensor") -> Tuple[bytes, int, Tuple[bytes, int]]:
    """The CUDA IPC handle of the allocation holding `tensor`, and the byte offset of the tensor's first element
    inside that allocation: (64-byte cudaIpcMemHandle_t, offset_bytes, torch's IPC reference counter).

    Uses torch's own sharing (`untyped_storage()._share_cuda_()`, as torch.multiprocessing does): the storage's
    offset in the caching allocator's block comes from torch, plus the tensor's storage_offset. Torch >= 2.2
    prefixes the raw handle with a version and a type byte ('c' for cudaMalloc memory); an expandable segment
    ('e') has no cudaIpcMemHandle_t and is refused with FailedPrecondition. The counter is torch's count of
    consumers of the shared block: pass it to release_cuda_ipc() once the daemon no longer maps the memory.
    """
    torch = _torch()
    if not tensor.is_cuda:
        raise InvalidArgument("cuda_ipc_handle needs a CUDA tensor")
    if not hasattr(tensor, "untyped_storage"):
        raise FailedPrecondition(f"CUDA KV caches need torch >= 2.0 (this is {torch.__version__})")
    share = tensor.untyped_storage()._share_cuda_()
    handle, storage_offset_bytes, ref_counter, ref_counter_offset = share[1], share[3], share[4], share[5]
    if len(handle) == _CUDA_IPC_HANDLE_SIZE:  # torch < 2.2: the raw handle
        raw = bytes(handle)
    elif len(handle) == _CUDA_IPC_HANDLE_SIZE + 2 and handle[1:2] == b"c":  # version, 'c', handle
        raw = bytes(handle[2:])
    else:
        raise FailedPrecondition(
            "the tensor's memory is not a plain cudaMalloc allocation (an expandable segment?): kvtd maps only "
            "cudaIpcMemHandle_t memory; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False")
    offset = int(storage_offset_bytes) + tensor.storage_offset() * tensor.element_size()
    return raw, offset, (ref_counter, int(ref_counter_offset))


def release_cuda_ipc(counter: Tuple[bytes, int]) -> None:
    """Tells torch one consumer of a block shared by cuda_ipc_handle() is done with it, so that freeing the
    tensor returns the memory to the allocator (else torch keeps it, unused, until the process exits)."""
    torch = _torch()
    torch.UntypedStorage._release_ipc_counter_cuda(counter[0], counter[1])


class KvCache:
    """A KV cache laid out by a KvLayout, in host shared memory or on a CUDA device. A context manager."""

    def __init__(self, layout: KvLayout, device: str, shm: Optional[ShmSegment],
                 tensor: Optional["torch.Tensor"]) -> None:
        """Use allocate(); this only takes ownership of memory already allocated for `layout`."""
        self._layout = layout
        self._device = device
        self._shm = shm
        self._tensor = tensor  # CUDA caches: one flat uint8 tensor of layout.size_bytes
        self._registration: Optional[Tuple[Client, str]] = None
        self._ipc: Optional[Tuple[bytes, int, Tuple[bytes, int]]] = None  # cuda_ipc_handle(), taken once
        self._closed = False

    @classmethod
    def allocate(cls, layout: KvLayout, device: str = "cpu", shm_name: Optional[str] = None) -> "KvCache":
        """Allocates a zero-filled cache of layout.size_bytes.

        `device` "cpu": a POSIX shared-memory segment named `shm_name` (default: a unique "/kvt-<pid>-<hex>").
        `device` "cuda" / "cuda:N": a torch uint8 tensor on that device (torch required). InvalidArgument for an
        unknown device or strides that are not multiples of the element size; AlreadyExists for a taken name.
        """
        if not isinstance(layout, KvLayout):
            raise InvalidArgument(f"layout must be a kvt.KvLayout, got {type(layout).__name__}")
        itemsize = layout.dtype.itemsize  # type: ignore[union-attr]
        if layout.layer_stride_bytes % itemsize or layout.kv_stride_bytes % itemsize:
            raise InvalidArgument(f"strides must be multiples of the element size ({itemsize} bytes) for views")
        device = str(device)
        if device == "cpu":
            return cls(layout, device, ShmSegment.create(shm_name, layout.size_bytes), None)
        if device == "cuda" or device.startswith("cuda:"):
            if shm_name is not None:
                raise InvalidArgument("shm_name is for host caches; a CUDA cache lives in GPU memory")
            torch = _torch()
            if not torch.cuda.is_available():
                raise FailedPrecondition(f"device {device}: CUDA is not available to torch")
            tensor = torch.zeros(layout.size_bytes, dtype=torch.uint8, device=device)
            return cls(layout, str(tensor.device), None, tensor)
        raise InvalidArgument(f"device must be \"cpu\", \"cuda\" or \"cuda:N\", got {device!r}")

    # --- what it is ------------------------------------------------------------------------------------------

    @property
    def layout(self) -> KvLayout:
        return self._layout

    @property
    def device(self) -> str:
        """"cpu" or the torch CUDA device ("cuda:0")."""
        return self._device

    @property
    def is_cuda(self) -> bool:
        return self._tensor is not None

    @property
    def size_bytes(self) -> int:
        return self._layout.size_bytes

    @property
    def shm_name(self) -> Optional[str]:
        """The shared-memory segment's name of a host cache; None for a CUDA cache."""
        return self._shm.name if self._shm is not None else None

    @property
    def region_id(self) -> Optional[str]:
        """The id it is registered under, or None."""
        return self._registration[1] if self._registration is not None else None

    @property
    def closed(self) -> bool:
        return self._closed

    # --- views -----------------------------------------------------------------------------------------------

    def k_numpy(self, layer: int) -> np.ndarray:
        """Layer `layer`'s K as a writable numpy view (layout.tensor_shape; bf16 as uint16, its bit pattern).
        Host caches only: FailedPrecondition for a CUDA cache."""
        return self._numpy(layer, _K)

    def v_numpy(self, layer: int) -> np.ndarray:
        """Layer `layer`'s V as a numpy view; see k_numpy."""
        return self._numpy(layer, _V)

    def k(self, layer: int) -> "torch.Tensor":
        """Layer `layer`'s K as a torch view ([blocks, tokens, heads, dim] for NHD, [blocks, heads, tokens, dim]
        for HND) of the layout's dtype (torch.bfloat16 for bf16), on the cache's device."""
        return self._torch_view(layer, _K)

    def v(self, layer: int) -> "torch.Tensor":
        """Layer `layer`'s V as a torch view; see k."""
        return self._torch_view(layer, _V)

    def numpy(self) -> np.ndarray:
        """The whole region as a flat uint8 numpy view (host caches only)."""
        return np.frombuffer(self._host_buffer(), dtype=np.uint8, count=self.size_bytes)

    def _host_buffer(self) -> Any:
        self._check_open()
        if self._shm is None:
            raise FailedPrecondition("a CUDA cache has no numpy views; use k()/v() (torch) or copy to the host")
        return self._shm.buffer

    def _numpy(self, layer: int, kind: int) -> np.ndarray:
        # np.frombuffer holds a buffer export of the mapping for as long as the view (or a torch tensor made
        # from it) lives, so close() cannot unmap memory a view still points into. (np.ndarray(buffer=...)
        # does not: the view would dangle.)
        layout = self._layout
        dtype = layout.dtype.numpy_dtype  # type: ignore[union-attr]
        flat = np.frombuffer(self._host_buffer(), dtype=dtype, count=layout.tensor_bytes // dtype.itemsize,
                             offset=layout.tensor_offset(layer, kind))
        return flat.reshape(layout.tensor_shape)

    def _torch_view(self, layer: int, kind: int) -> "torch.Tensor":
        self._check_open()
        torch = _torch()
        dtype = _torch_dtype(self._layout.dtype)  # type: ignore[arg-type]
        if self._tensor is None:
            array = self._numpy(layer, kind)
            if dtype is torch.bfloat16:  # numpy has no bfloat16; torch reads the same bits as int16
                return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
            return torch.from_numpy(array)
        offset = self._layout.tensor_offset(layer, kind)
        flat = self._tensor.narrow(0, offset, self._layout.tensor_bytes)
        return flat.view(dtype).view(self._layout.tensor_shape)

    # --- registration ----------------------------------------------------------------------------------------

    def register(self, client: Client, region_id: str, daemon_device: Optional[int] = None) -> None:
        """Registers the cache with the daemon of `client` as `region_id`; close() unregisters it.

        A CUDA cache waits for the device's pending work first (so the daemon sees the zero fill and any
        writes queued before), then registers its allocation's IPC handle and offset; `daemon_device` is the
        daemon's CUDA ordinal of this GPU (default: this process's index, right when both see the same
        CUDA_VISIBLE_DEVICES). FailedPrecondition if already registered; the daemon's errors as raised by
        Client.register_region / register_gpu_region.
        """
        self._check_open()
        if self._registration is not None:
            raise FailedPrecondition(f"the cache is already registered as {self._registration[1]!r}")
        if self._tensor is None:
            assert self._shm is not None
            client.register_region(region_id, self._layout, shm_name=self._shm.name, size_bytes=self._shm.size)
        else:
            torch = _torch()
            torch.cuda.synchronize(self._tensor.device)
            if self._ipc is None:  # each _share_cuda_ sets up a new torch counter: share once, register often
                self._ipc = cuda_ipc_handle(self._tensor)
            handle, offset, _ = self._ipc
            device = self._tensor.device.index if daemon_device is None else daemon_device
            client.register_gpu_region(region_id, self._layout, ipc_handle=handle, size_bytes=self.size_bytes,
                                       device=device, offset_bytes=offset)
        self._registration = (client, region_id)

    def unregister(self) -> None:
        """Unregisters the region if it is registered. A daemon that no longer knows it (NotFound) or is gone
        (Unavailable) counts as done. FailedPrecondition while a transfer still uses it (cancel those first);
        the cache then stays registered."""
        if self._registration is None:
            return
        client, region_id = self._registration
        try:
            client.unregister_region(region_id)
        except (NotFound, Unavailable) as e:
            _LOG.debug("region %s: %s (counted as unregistered)", region_id, e)
        self._registration = None

    def close(self) -> None:
        """Unregisters (see unregister), then releases the memory: a host cache's segment is unlinked and
        unmapped (views already taken keep their mapping alive), a CUDA cache's tensor is dropped.

        If unregistering fails (a transfer still uses the region, FailedPrecondition), the error is raised and
        the memory kept, so the daemon never writes into memory given back; cancel and close again. Idempotent.
        """
        if self._closed:
            return
        self.unregister()
        self._closed = True
        if self._shm is not None:
            self._shm.close()
        if self._tensor is not None:
            if self._ipc is not None:
                try:
                    release_cuda_ipc(self._ipc[2])
                except Exception as e:  # best effort: at worst torch keeps the block until exit
                    _LOG.warning("releasing the CUDA IPC counter failed (torch keeps the block until exit): %s", e)
            self._tensor = None

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPrecondition("the KV cache is closed")

    def __enter__(self) -> "KvCache":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        try:
            self.close()
        except KvtError:
            if exc is None:
                raise
            _LOG.warning("closing a KV cache while handling another error failed", exc_info=True)

    def __repr__(self) -> str:
        where = self._shm.name if self._shm is not None else self._device
        return f"KvCache({where}, {self.size_bytes} bytes, region={self.region_id!r}, closed={self._closed})"
