"""KvLayout: derived strides, shapes and sizes, and what it refuses before any daemon sees it."""
from __future__ import annotations

import numpy as np
import pytest

import kvt
from kvt._proto import layout_pb2


def layout(**overrides) -> kvt.KvLayout:  # type: ignore[no-untyped-def]
    args = dict(num_layers=3, num_blocks=10, block_tokens=16, num_kv_heads=4, head_dim=32)
    args.update(overrides)
    return kvt.KvLayout(**args)  # type: ignore[arg-type]


def test_dense_strides_are_derived() -> None:
    l = layout()
    tensor = 10 * 16 * 4 * 32 * 2
    assert l.tensor_bytes == tensor and l.kv_stride_bytes == tensor and l.layer_stride_bytes == 2 * tensor
    assert l.size_bytes == 3 * 2 * tensor
    assert l.tensor_offset(2, 1) == 5 * tensor


def test_given_strides_are_kept_and_size_ends_at_the_last_tensor() -> None:
    l = layout(dtype="fp32", kv_stride_bytes=100_000, layer_stride_bytes=300_000)
    assert l.kv_stride_bytes == 100_000 and l.layer_stride_bytes == 300_000
    assert l.size_bytes == 2 * 300_000 + 100_000 + l.tensor_bytes


def test_shapes_follow_the_order() -> None:
    assert layout(order="NHD").tensor_shape == (10, 16, 4, 32)
    assert layout(order="hnd").tensor_shape == (10, 4, 16, 32)
    assert layout(order=kvt.BlockOrder.HND).order is kvt.BlockOrder.HND


@pytest.mark.parametrize("given,expected", [
    ("bf16", kvt.DType.BF16), ("bfloat16", kvt.DType.BF16), ("fp16", kvt.DType.FP16), ("half", kvt.DType.FP16),
    ("float32", kvt.DType.FP32), (np.float16, kvt.DType.FP16), (np.dtype("float32"), kvt.DType.FP32),
    (kvt.DType.BF16, kvt.DType.BF16),
])
def test_dtypes_are_accepted_by_any_common_name(given, expected: kvt.DType) -> None:  # type: ignore[no-untyped-def]
    assert layout(dtype=given).dtype is expected


def test_torch_dtypes_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    assert layout(dtype=torch.bfloat16).dtype is kvt.DType.BF16
    assert layout(dtype=torch.float32).dtype is kvt.DType.FP32


def test_element_sizes_and_numpy_types() -> None:
    assert [d.itemsize for d in kvt.DType] == [2, 2, 4]
    assert kvt.DType.BF16.numpy_dtype == np.uint16  # numpy has no bfloat16: the bits
    assert kvt.DType.FP16.numpy_dtype == np.float16 and kvt.DType.FP32.numpy_dtype == np.float32


@pytest.mark.parametrize("overrides,match", [
    (dict(dtype="int8"), "dtype"),
    (dict(dtype=np.int32), "dtype"),
    (dict(order="NDH"), "order"),
    (dict(num_layers=0), "num_layers"),
    (dict(head_dim=-4), "head_dim"),
    (dict(num_blocks=2.5), "num_blocks"),
    (dict(block_tokens=True), "block_tokens"),
    (dict(head_begin=-1), "head_begin"),
    (dict(kv_stride_bytes=100), "kv_stride_bytes"),
    (dict(layer_stride_bytes=100), "layer_stride_bytes"),
])
def test_bad_layouts_are_invalid_arguments(overrides, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(kvt.InvalidArgument, match=match):
        layout(**overrides)


def test_tensor_offsets_check_their_range() -> None:
    with pytest.raises(kvt.InvalidArgument, match="layer 3"):
        layout().tensor_offset(3, 0)
    with pytest.raises(kvt.InvalidArgument, match="kind"):
        layout().tensor_offset(0, 2)


def test_proto_round_trip_keeps_every_field() -> None:
    l = layout(dtype="fp16", order="HND", head_begin=4, total_kv_heads=8, kv_stride_bytes=50_000,
               layer_stride_bytes=120_000)
    message = l.to_proto()
    assert message.dtype == layout_pb2.DTYPE_FP16 and message.order == layout_pb2.BLOCK_ORDER_HND
    assert message.head_begin == 4 and message.total_kv_heads == 8 and message.kv_stride_bytes == 50_000
    assert kvt.KvLayout.from_proto(message) == l
    with pytest.raises(kvt.InvalidArgument):
        kvt.KvLayout.from_proto(layout_pb2.KvLayout(num_layers=1))


def test_layouts_are_immutable_values() -> None:
    with pytest.raises(AttributeError):
        layout().num_layers = 5  # type: ignore[misc]
    assert layout() == layout() and hash(layout()) == hash(layout())
