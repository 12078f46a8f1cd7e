"""KvCache and ShmSegment on the host: views onto shared memory, and its lifetime."""
from __future__ import annotations

import os

import numpy as np
import pytest

import kvt

LAYOUT = kvt.KvLayout(num_layers=2, num_blocks=4, block_tokens=8, num_kv_heads=2, head_dim=16)


def shm_path(name: str) -> str:
    return "/dev/shm/" + name[1:]


def test_a_host_cache_is_a_zeroed_shared_memory_segment() -> None:
    with kvt.KvCache.allocate(LAYOUT) as cache:
        assert cache.shm_name is not None and os.path.getsize(shm_path(cache.shm_name)) == LAYOUT.size_bytes
        assert not cache.is_cuda and cache.device == "cpu" and cache.size_bytes == LAYOUT.size_bytes
        assert not cache.numpy().any()


def test_numpy_views_have_the_layouts_shape_and_sit_at_its_offsets() -> None:
    with kvt.KvCache.allocate(LAYOUT) as cache:
        k1 = cache.k_numpy(1)
        assert k1.shape == (4, 8, 2, 16) and k1.dtype == np.uint16
        k1[...] = 0x3F80  # bf16 1.0
        flat = cache.numpy().view(np.uint16)
        start = LAYOUT.tensor_offset(1, 0) // 2
        assert (flat[start:start + k1.size] == 0x3F80).all()
        assert not flat[:start].any() and not flat[start + k1.size:].any()  # V of layer 1 untouched


def test_hnd_views_put_heads_before_tokens() -> None:
    layout = kvt.KvLayout(num_layers=1, num_blocks=4, block_tokens=8, num_kv_heads=2, head_dim=16, order="HND",
                          dtype="fp32")
    with kvt.KvCache.allocate(layout) as cache:
        assert cache.v_numpy(0).shape == (4, 2, 8, 16) and cache.v_numpy(0).dtype == np.float32


def test_torch_views_share_memory_with_numpy_views() -> None:
    torch = pytest.importorskip("torch")
    with kvt.KvCache.allocate(LAYOUT) as cache:
        k = cache.k(0)
        assert k.dtype is torch.bfloat16 and tuple(k.shape) == (4, 8, 2, 16)
        k[1, 2, 0, 3] = 1.5
        assert cache.k_numpy(0)[1, 2, 0, 3] == 0x3FC0  # bf16 bits of 1.5
        cache.v_numpy(1)[...] = 0x4000  # bf16 2.0
        assert bool((cache.v(1) == 2.0).all())


@pytest.mark.parametrize("dtype,torch_name", [("fp16", "float16"), ("fp32", "float32")])
def test_torch_views_take_the_layouts_dtype(dtype: str, torch_name: str) -> None:
    torch = pytest.importorskip("torch")
    layout = kvt.KvLayout(num_layers=1, num_blocks=2, block_tokens=4, num_kv_heads=1, head_dim=8, dtype=dtype)
    with kvt.KvCache.allocate(layout) as cache:
        cache.k(0).fill_(0.25)
        assert cache.k(0).dtype is getattr(torch, torch_name)
        assert (cache.k_numpy(0) == 0.25).all() and not cache.v_numpy(0).any()


def test_close_unlinks_the_segment_and_views_refuse_afterwards() -> None:
    cache = kvt.KvCache.allocate(LAYOUT)
    name = cache.shm_name
    assert name is not None
    view = cache.k_numpy(0)
    cache.close()
    cache.close()  # idempotent
    assert not os.path.exists(shm_path(name))
    view[0, 0, 0, 0] = 7  # a view taken before close keeps its mapping
    with pytest.raises(kvt.FailedPrecondition, match="closed"):
        cache.k_numpy(0)


def test_a_taken_shm_name_is_already_exists() -> None:
    with kvt.KvCache.allocate(LAYOUT) as cache:
        with pytest.raises(kvt.AlreadyExists):
            kvt.KvCache.allocate(LAYOUT, shm_name=cache.shm_name)


@pytest.mark.parametrize("name", ["no-slash", "/two/slashes", "/", "/" + "x" * 255])
def test_bad_shm_names_are_invalid(name: str) -> None:
    with pytest.raises(kvt.InvalidArgument, match="shm name"):
        kvt.ShmSegment.create(name, 4096)


def test_segments_need_a_positive_size() -> None:
    with pytest.raises(kvt.InvalidArgument, match="size"):
        kvt.ShmSegment.create(None, 0)


def test_a_segment_is_a_context_manager() -> None:
    with kvt.ShmSegment.create(None, 4096) as shm:
        shm.buffer[:3] = b"kvt"
        path = shm_path(shm.name)
        with open(path, "rb") as f:
            assert f.read(3) == b"kvt"
    assert shm.closed and not os.path.exists(path)
    with pytest.raises(kvt.FailedPrecondition):
        shm.buffer


def test_unknown_devices_are_invalid() -> None:
    with pytest.raises(kvt.InvalidArgument, match="device"):
        kvt.KvCache.allocate(LAYOUT, device="tpu")


def test_strides_must_keep_elements_aligned() -> None:
    layout = kvt.KvLayout(num_layers=2, num_blocks=1, block_tokens=1, num_kv_heads=1, head_dim=2, dtype="fp32",
                          kv_stride_bytes=10, layer_stride_bytes=22)
    with pytest.raises(kvt.InvalidArgument, match="multiples"):
        kvt.KvCache.allocate(layout)


def test_a_cuda_cache_without_cuda_is_a_failed_precondition() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: tests/test_cuda.py covers CUDA caches")
    with pytest.raises(kvt.FailedPrecondition, match="CUDA"):
        kvt.KvCache.allocate(LAYOUT, device="cuda:0")
