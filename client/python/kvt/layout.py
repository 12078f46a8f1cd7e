"""KvLayout: the shape and placement of a paged KV cache in a registered region (proto/kvt/v1/layout.proto).

Every layer's K and V tensor has the same shape and is dense; tensor (layer l, kind k in {0 = K, 1 = V}) starts
at byte `layer_stride_bytes * l + kv_stride_bytes * k` of the region. Strides left at 0 are derived as the dense
layout [layer][K, V][blocks...]:

    layout = kvt.KvLayout(num_layers=32, num_blocks=1024, block_tokens=16, num_kv_heads=8, head_dim=128,
                          dtype="bf16", order="NHD")
    layout.size_bytes   # bytes the region needs
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Tuple, Union

import numpy as np

from kvt.errors import InvalidArgument


class DType(str, enum.Enum):
    """Element type of a KV cache as the engine stores it."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return 4 if self is DType.FP32 else 2

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype of views: uint16 for bf16 (numpy has no bfloat16), else float16 / float32."""
        return np.dtype({DType.BF16: np.uint16, DType.FP16: np.float16, DType.FP32: np.float32}[self])

    @classmethod
    def parse(cls, value: Any) -> "DType":
        """A DType from itself, a name ("bf16", "bfloat16", "fp16", "float16", "half", "fp32", "float32",
        "float"), a torch dtype or a numpy float dtype. InvalidArgument for anything else."""
        if isinstance(value, DType):
            return value
        name = str(value).lower().removeprefix("torch.")
        if not isinstance(value, str):
            try:
                name = np.dtype(value).name
            except TypeError:
                pass  # not a numpy dtype: a torch dtype ("torch.bfloat16") or nothing known
        aliases = {"bf16": cls.BF16, "bfloat16": cls.BF16, "fp16": cls.FP16, "float16": cls.FP16, "half": cls.FP16,
                   "fp32": cls.FP32, "float32": cls.FP32, "float": cls.FP32}
        if name not in aliases:
            raise InvalidArgument(f"dtype must be bf16, fp16 or fp32, got {value!r}")
        return aliases[name]


class BlockOrder(str, enum.Enum):
    """Order of the four axes of one layer's K (or V) tensor."""

    NHD = "NHD"  # [num_blocks, block_tokens, num_kv_heads, head_dim]
    HND = "HND"  # [num_blocks, num_kv_heads, block_tokens, head_dim]

    @classmethod
    def parse(cls, value: Union["BlockOrder", str]) -> "BlockOrder":
        """A BlockOrder from itself or "NHD" / "HND" (any case). InvalidArgument for anything else."""
        if isinstance(value, BlockOrder):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            raise InvalidArgument(f"order must be NHD or HND, got {value!r}") from None


@dataclass(frozen=True)
class KvLayout:
    """A KV cache's layout. Construction validates what the client can check alone (positive sizes, a known
    dtype and order, strides that hold a dense tensor); the daemon checks its own limits when the region is
    registered (sizes up to 1024, blocks up to 2^24, the layout fitting in the memory)."""

    num_layers: int
    num_blocks: int
    block_tokens: int  # tokens per engine block
    num_kv_heads: int  # heads held by this region (its tensor-parallel shard)
    head_dim: int
    # A DType after construction; given as one, a name ("bf16"), a torch dtype or a numpy dtype.
    dtype: Union[DType, str, Any] = DType.BF16
    # A BlockOrder after construction; given as one or "NHD" / "HND".
    order: Union[BlockOrder, str] = BlockOrder.NHD
    head_begin: int = 0  # tensor parallelism: this region holds heads [head_begin, head_begin + num_kv_heads)
    total_kv_heads: int = 0  # of the model; 0 means num_kv_heads (unsharded)
    layer_stride_bytes: int = 0  # 0: dense, 2 * kv_stride_bytes
    kv_stride_bytes: int = 0  # 0: dense, tensor_bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", DType.parse(self.dtype))
        object.__setattr__(self, "order", BlockOrder.parse(self.order))
        for name in ("num_layers", "num_blocks", "block_tokens", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise InvalidArgument(f"KvLayout.{name} must be a positive integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name in ("head_begin", "total_kv_heads", "layer_stride_bytes", "kv_stride_bytes"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise InvalidArgument(f"KvLayout.{name} must be a non-negative integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.kv_stride_bytes == 0:
            object.__setattr__(self, "kv_stride_bytes", self.tensor_bytes)
        if self.layer_stride_bytes == 0:
            object.__setattr__(self, "layer_stride_bytes", 2 * self.kv_stride_bytes)
        if self.kv_stride_bytes < self.tensor_bytes:
            raise InvalidArgument(f"kv_stride_bytes {self.kv_stride_bytes} is less than one tensor "
                                  f"({self.tensor_bytes} bytes)")
        if self.layer_stride_bytes < 2 * self.kv_stride_bytes:
            raise InvalidArgument(f"layer_stride_bytes {self.layer_stride_bytes} is less than "
                                  f"2 * kv_stride_bytes ({2 * self.kv_stride_bytes})")

    @property
    def tensor_shape(self) -> Tuple[int, int, int, int]:
        """Shape of one layer's K (or V): [blocks, tokens, heads, dim] for NHD, [blocks, heads, tokens, dim] for
        HND."""
        if self.order is BlockOrder.NHD:
            return (self.num_blocks, self.block_tokens, self.num_kv_heads, self.head_dim)
        return (self.num_blocks, self.num_kv_heads, self.block_tokens, self.head_dim)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one layer's K (or V) tensor."""
        return math.prod(self.tensor_shape) * self.dtype.itemsize

    @property
    def size_bytes(self) -> int:
        """Bytes a region needs to hold this layout: up to the last byte of the last layer's V."""
        return self.tensor_offset(self.num_layers - 1, 1) + self.tensor_bytes

    def tensor_offset(self, layer: int, kind: int) -> int:
        """Byte offset in the region of `layer`'s K (kind 0) or V (kind 1). InvalidArgument if out of range."""
        if not 0 <= layer < self.num_layers:
            raise InvalidArgument(f"layer {layer} is outside 0..{self.num_layers - 1}")
        if kind not in (0, 1):
            raise InvalidArgument(f"kind must be 0 (K) or 1 (V), got {kind!r}")
        return self.layer_stride_bytes * layer + self.kv_stride_bytes * kind

    def to_proto(self) -> Any:
        """The kvt.v1.KvLayout message."""
        from kvt._proto import layout_pb2

        return layout_pb2.KvLayout(
            num_layers=self.num_layers, num_blocks=self.num_blocks, block_tokens=self.block_tokens,
            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
            dtype={DType.BF16: layout_pb2.DTYPE_BF16, DType.FP16: layout_pb2.DTYPE_FP16,
                   DType.FP32: layout_pb2.DTYPE_FP32}[self.dtype],
            order={BlockOrder.NHD: layout_pb2.BLOCK_ORDER_NHD, BlockOrder.HND: layout_pb2.BLOCK_ORDER_HND}[self.order],
            layer_stride_bytes=self.layer_stride_bytes, kv_stride_bytes=self.kv_stride_bytes,
            head_begin=self.head_begin, total_kv_heads=self.total_kv_heads)

    @classmethod
    def from_proto(cls, message: Any) -> "KvLayout":
        """A KvLayout from a kvt.v1.KvLayout message. InvalidArgument for an unspecified dtype or order."""
        from kvt._proto import layout_pb2

        dtypes = {layout_pb2.DTYPE_BF16: DType.BF16, layout_pb2.DTYPE_FP16: DType.FP16,
                  layout_pb2.DTYPE_FP32: DType.FP32}
        orders = {layout_pb2.BLOCK_ORDER_NHD: BlockOrder.NHD, layout_pb2.BLOCK_ORDER_HND: BlockOrder.HND}
        if message.dtype not in dtypes or message.order not in orders:
            raise InvalidArgument("the message's dtype or order is unspecified")
        return cls(num_layers=message.num_layers, num_blocks=message.num_blocks, block_tokens=message.block_tokens,
                   num_kv_heads=message.num_kv_heads, head_dim=message.head_dim, dtype=dtypes[message.dtype],
                   order=orders[message.order], head_begin=message.head_begin,
                   total_kv_heads=message.total_kv_heads, layer_stride_bytes=message.layer_stride_bytes,
                   kv_stride_bytes=message.kv_stride_bytes)
