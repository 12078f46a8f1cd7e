"""CUDA KV caches registered through CUDA IPC (the daemons' GPU path). Skipped without torch and a CUDA device;
run them on a GPU machine with a kvtd built with CUDA."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import kvt
from kvt.kv_cache import release_cuda_ipc

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# block_tokens 32 divides the codec's 32-token chunk, as the GPU path requires.
LAYOUT = kvt.KvLayout(num_layers=2, num_blocks=8, block_tokens=32, num_kv_heads=2, head_dim=64)


def fill(cache: kvt.KvCache, seed: int) -> None:
    generator = torch.Generator(device=cache.device).manual_seed(seed)
    for layer in range(cache.layout.num_layers):
        for view in (cache.k(layer), cache.v(layer)):
            view.copy_(torch.randn(view.shape, generator=generator, device=cache.device))


def test_cuda_views_are_tensors_on_the_device() -> None:
    with kvt.KvCache.allocate(LAYOUT, device="cuda:0") as cache:
        k = cache.k(1)
        assert k.is_cuda and k.dtype is torch.bfloat16 and tuple(k.shape) == LAYOUT.tensor_shape
        k.fill_(1.0)
        assert k.data_ptr() - cache.k(0).data_ptr() == LAYOUT.layer_stride_bytes
        assert cache.v(1).data_ptr() - k.data_ptr() == LAYOUT.kv_stride_bytes
        assert not cache.v(1).any() and not cache.k(0).any()
        with pytest.raises(kvt.FailedPrecondition, match="numpy"):
            cache.k_numpy(0)


def test_ipc_handle_offsets_count_the_tensors_place_in_its_allocation() -> None:
    base = torch.zeros(4 << 20, dtype=torch.uint8, device="cuda:0")
    handle, offset, _ = kvt.cuda_ipc_handle(base)
    inner_handle, inner_offset, _ = kvt.cuda_ipc_handle(base[1 << 20:])
    assert len(handle) == 64 and inner_handle == handle
    assert inner_offset == offset + (1 << 20)


def transfer(start_daemon: Callable[..., kvt.Daemon], src: kvt.KvCache,
             register_dst: Callable[[kvt.Client], None], scheme: str,
             dst: kvt.KvCache | None = None) -> None:
    """Registers `src` as "src" on a prefill daemon and, through `register_dst`, "dst" on a decode daemon, then
    moves every block of src into the same blocks of dst, and unregisters both while their clients are open:
    through `dst` when it is a KvCache (which must know it is unregistered, or its close would try again through
    a closed client), else through the decode daemon's client."""
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc:
        try:
            src.register(pc, "src")
            register_dst(dc)
        except kvt.FailedPrecondition as e:
            pytest.skip(f"this kvtd has no GPU path: {e}")
        tokens = LAYOUT.num_blocks * LAYOUT.block_tokens
        dc.expect("g", "dst", range(LAYOUT.num_blocks), tokens)
        pc.offer("g", "src", range(LAYOUT.num_blocks), tokens, range(LAYOUT.num_layers), scheme=scheme,
                 decode_daemon=decode.peer_address)
        events = list(dc.watch("g", timeout=60.0))
        assert events[-1].kind is kvt.EventKind.DONE, events
        src.close()  # unregisters, then hands the memory back to torch
        if dst is not None:
            dst.unregister()
        else:
            dc.unregister_region("dst")


def test_a_bf16_transfer_between_cuda_caches_is_lossless(start_daemon: Callable[..., kvt.Daemon]) -> None:
    with kvt.KvCache.allocate(LAYOUT, device="cuda:0") as src, kvt.KvCache.allocate(LAYOUT, device="cuda:0") as dst:
        fill(src, seed=1)
        expected = [src.k(l).cpu() for l in range(LAYOUT.num_layers)]
        transfer(start_daemon, src, lambda client: dst.register(client, "dst"), "bf16", dst=dst)
        for layer in range(LAYOUT.num_layers):
            assert torch.equal(dst.k(layer).cpu(), expected[layer])


def test_a_lynx_transfer_from_cuda_into_a_host_cache_is_close(start_daemon: Callable[..., kvt.Daemon]) -> None:
    with kvt.KvCache.allocate(LAYOUT, device="cuda:0") as src, kvt.KvCache.allocate(LAYOUT) as dst:
        fill(src, seed=2)
        expected = [src.v(l).float().cpu().numpy() for l in range(LAYOUT.num_layers)]
        transfer(start_daemon, src, lambda client: dst.register(client, "dst"), "lynx", dst=dst)
        for layer in range(LAYOUT.num_layers):
            got = dst.v(layer).float().numpy()
            assert np.abs(got - expected[layer]).max() <= 0.05 * np.abs(expected[layer]).max()


def test_a_region_inside_a_larger_allocation_is_written_at_its_offset(
        start_daemon: Callable[..., kvt.Daemon]) -> None:
    # What a caching allocator hands out: the region starts 1 MiB into the allocation its IPC handle names.
    lead = 1 << 20
    allocation = torch.zeros(lead + LAYOUT.size_bytes, dtype=torch.uint8, device="cuda:0")
    region = allocation[lead:]
    handle, offset, counter = kvt.cuda_ipc_handle(region)
    assert offset >= lead
    with kvt.KvCache.allocate(LAYOUT, device="cuda:0") as src:
        fill(src, seed=3)
        expected = [src.k(layer).clone() for layer in range(LAYOUT.num_layers)]
        transfer(start_daemon, src, lambda client: client.register_gpu_region(
            "dst", LAYOUT, ipc_handle=handle, size_bytes=LAYOUT.size_bytes, device=0, offset_bytes=offset),
            "bf16")
    release_cuda_ipc(counter)  # the daemon unregistered "dst"
    for layer in range(LAYOUT.num_layers):
        start = LAYOUT.tensor_offset(layer, 0)
        k = region[start:start + LAYOUT.tensor_bytes].view(torch.bfloat16).view(LAYOUT.tensor_shape)
        assert torch.equal(k, expected[layer])
    assert not allocation[:lead].any()  # nothing before the region was touched


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_a_gpu_region_holding_some_of_the_sources_heads_gets_exactly_those(
        start_daemon: Callable[..., kvt.Daemon], order: str) -> None:
    # Tensor parallelism of different sizes: the source holds heads [0, 3) of 3, the decode region head 1 only.
    # The last block is half full (240 tokens in 8 blocks of 32): its other tokens must stay untouched.
    import dataclasses
    src_layout = kvt.KvLayout(num_layers=2, num_blocks=8, block_tokens=32, num_kv_heads=3, head_dim=64, order=order)
    dst_layout = dataclasses.replace(src_layout, num_kv_heads=1, head_begin=1, total_kv_heads=3)
    tokens = 8 * 32 - 16
    head = (slice(None), slice(None), slice(1, 2)) if order == "NHD" else (slice(None), slice(1, 2))
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc, \
            kvt.KvCache.allocate(src_layout, device="cuda:0") as src, \
            kvt.KvCache.allocate(dst_layout, device="cuda:0") as gpu_dst, \
            kvt.KvCache.allocate(dst_layout) as host_dst:
        fill(src, seed=4)
        try:
            src.register(pc, "src")
            gpu_dst.register(dc, "gpu")
        except kvt.FailedPrecondition as e:
            pytest.skip(f"this kvtd has no GPU path: {e}")
        host_dst.register(dc, "host")

        def move(request: str, region: str, scheme: str) -> None:
            dc.expect(request, region, range(8), tokens)
            pc.offer(request, "src", range(8), tokens, range(2), scheme=scheme, decode_daemon=decode.peer_address)
            events = list(dc.watch(request, timeout=60.0))
            assert events[-1].kind is kvt.EventKind.DONE, events

        def valid(t: "torch.Tensor") -> "torch.Tensor":  # the transferred tokens of a [blocks, ...] tensor
            flat = t.transpose(1, 2) if order == "HND" else t
            return flat.reshape(-1, *flat.shape[2:])[:tokens]

        move("bf16", "gpu", "bf16")
        for layer in range(2):
            for got, want in ((gpu_dst.k(layer), src.k(layer)), (gpu_dst.v(layer), src.v(layer))):
                assert torch.equal(valid(got), valid(want[head].contiguous()))
                assert not valid_tail(got, order, tokens).any()
        # lynx: the GPU decode re-sliced equals the CPU decode re-sliced, bit for bit.
        move("lynx-gpu", "gpu", "lynx")
        move("lynx-host", "host", "lynx")
        for layer in range(2):
            assert torch.equal(gpu_dst.k(layer).cpu(), host_dst.k(layer).cpu())
            assert torch.equal(gpu_dst.v(layer).cpu(), host_dst.v(layer).cpu())
            assert gpu_dst.k(layer).any()
        src.unregister()
        gpu_dst.unregister()
        host_dst.unregister()


def valid_tail(t: "torch.Tensor", order: str, tokens: int) -> "torch.Tensor":
    """The tokens of a [blocks, ...] tensor after the first `tokens`."""
    flat = t.transpose(1, 2) if order == "HND" else t
    return flat.reshape(-1, *flat.shape[2:])[tokens:]


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_a_gpu_region_wider_than_its_source_gets_the_sources_heads_and_keeps_the_others(
        start_daemon: Callable[..., kvt.Daemon], order: str) -> None:
    # Tensor parallelism 2 -> 1: the source rank holds heads [1, 3) of 3, the decode region all 3; head 0 is
    # another rank's to fill and must stay as it was (zero here).
    import dataclasses
    dst_layout = kvt.KvLayout(num_layers=2, num_blocks=8, block_tokens=32, num_kv_heads=3, head_dim=64, order=order)
    src_layout = dataclasses.replace(dst_layout, num_kv_heads=2, head_begin=1, total_kv_heads=3)
    tokens = 8 * 32 - 16
    mine = (slice(None), slice(None), slice(1, 3)) if order == "NHD" else (slice(None), slice(1, 3))
    other = (slice(None), slice(None), slice(0, 1)) if order == "NHD" else (slice(None), slice(0, 1))
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc, \
            kvt.KvCache.allocate(src_layout, device="cuda:0") as src, \
            kvt.KvCache.allocate(dst_layout, device="cuda:0") as gpu_dst, \
            kvt.KvCache.allocate(dst_layout) as host_dst:
        fill(src, seed=5)
        try:
            src.register(pc, "src")
            gpu_dst.register(dc, "gpu")
        except kvt.FailedPrecondition as e:
            pytest.skip(f"this kvtd has no GPU path: {e}")
        host_dst.register(dc, "host")

        def move(request: str, region: str, scheme: str) -> None:
            dc.expect(request, region, range(8), tokens)
            pc.offer(request, "src", range(8), tokens, range(2), scheme=scheme, decode_daemon=decode.peer_address)
            events = list(dc.watch(request, timeout=60.0))
            assert events[-1].kind is kvt.EventKind.DONE, events

        move("bf16", "gpu", "bf16")
        for layer in range(2):
            for got, want in ((gpu_dst.k(layer), src.k(layer)), (gpu_dst.v(layer), src.v(layer))):
                part = got[mine].contiguous()
                flat_got = (part.transpose(1, 2) if order == "HND" else part).reshape(-1, 2, 64)[:tokens]
                flat_want = (want.transpose(1, 2) if order == "HND" else want).reshape(-1, 2, 64)[:tokens]
                assert torch.equal(flat_got, flat_want)
                assert not got[other].any()
        move("lynx-gpu", "gpu", "lynx")
        move("lynx-host", "host", "lynx")
        for layer in range(2):
            assert torch.equal(gpu_dst.k(layer).cpu(), host_dst.k(layer).cpu())
            assert torch.equal(gpu_dst.v(layer).cpu(), host_dst.v(layer).cpu())
        src.unregister()
        gpu_dst.unregister()
        host_dst.unregister()
