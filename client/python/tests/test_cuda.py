"""CUDA KV caches registered through CUDA IPC (the daemons' GPU path). Skipped without torch and a CUDA device;
run them on a GPU machine with a kvtd built with CUDA."""
from __future__ import annotations

import dataclasses
from typing import Callable, List

import numpy as np
import pytest

import kvt
from kvt.kv_cache import release_cuda_ipc

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# 32-token blocks: the GPU path plans such regions' requests with 32-token chunks, so every page starts on a block
# (kvtd's GpuPlanChunkTokens; lynx's own chunk is 16 tokens).
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
             dst: kvt.KvCache | None = None, tokens: int | None = None) -> None:
    """Registers `src` as "src" on a prefill daemon and, through `register_dst`, "dst" on a decode daemon, then
    moves every block of src (a request of `tokens` tokens, default all of them) into the same blocks of dst, and
    unregisters both while their clients are open:
    through `dst` when it is a KvCache (which must know it is unregistered, or its close would try again through
    a closed client), else through the decode daemon's client."""
    prefill, decode = start_daemon("prefill"), start_daemon("decode")
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc:
        try:
            src.register(pc, "src")
            register_dst(dc)
        except kvt.FailedPrecondition as e:
            pytest.skip(f"this kvtd has no GPU path: {e}")
        if tokens is None:
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


def test_a_lynx_request_whose_tail_ends_mid_block_moves_between_cuda_caches(
        start_daemon: Callable[..., kvt.Daemon]) -> None:
    # 242 tokens: with lynx's own 16-token chunks its last page would start at token 240, inside the 8th block.
    tokens = 7 * LAYOUT.block_tokens + 18
    with kvt.KvCache.allocate(LAYOUT, device="cuda:0") as src, kvt.KvCache.allocate(LAYOUT, device="cuda:0") as dst:
        fill(src, seed=3)
        expected = [src.k(l).float().cpu().numpy() for l in range(LAYOUT.num_layers)]
        transfer(start_daemon, src, lambda client: dst.register(client, "dst"), "lynx", dst=dst, tokens=tokens)
        for layer in range(LAYOUT.num_layers):
            got = dst.k(layer).float().cpu().numpy().reshape(-1, LAYOUT.num_kv_heads * LAYOUT.head_dim)
            want = expected[layer].reshape(-1, LAYOUT.num_kv_heads * LAYOUT.head_dim)
            assert np.abs(got[:tokens] - want[:tokens]).max() <= 0.05 * np.abs(want[:tokens]).max()


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


# Tensor parallelism M -> N on GPU regions: 23 blocks of 32 tokens at shuffled, different ids on each side, the
# last block half full, and 64-token pages (the prefill daemon's --page_tokens), so a decode batch carries several
# pages and the scratch's block index differs from the region's.
RESLICE_BLOCKS = 24
RESLICE_TOKENS = 23 * 32 - 16
SRC_BLOCKS = [(7 * i + 3) % RESLICE_BLOCKS for i in range(23)]
DST_BLOCKS = [(5 * i + 1) % RESLICE_BLOCKS for i in range(23)]


def request_tokens(t: "torch.Tensor", order: str, blocks: List[int], tokens: int) -> "torch.Tensor":
    """[tokens, heads, dim] of a [blocks, ...] K or V tensor: the request's tokens, in its block order."""
    picked = t[blocks]
    if order == "HND":
        picked = picked.transpose(1, 2)
    return picked.reshape(-1, *picked.shape[2:])[:tokens]


def resliced_transfers(start_daemon: Callable[..., kvt.Daemon], src_layout: kvt.KvLayout,
                       dst_layout: kvt.KvLayout, seed: int,
                       check: Callable[[kvt.KvCache, kvt.KvCache], None]) -> None:
    """bf16 into a GPU region (then `check(src, gpu_dst)`), and lynx into that GPU region and into a host region
    of the same layout, which must come out bitwise equal."""
    prefill = start_daemon("prefill", extra=["--page_tokens=64"])
    decode = start_daemon("decode")
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc, \
            kvt.KvCache.allocate(src_layout, device="cuda:0") as src, \
            kvt.KvCache.allocate(dst_layout, device="cuda:0") as gpu_dst, \
            kvt.KvCache.allocate(dst_layout) as host_dst:
        fill(src, seed=seed)
        try:
            src.register(pc, "src")
            gpu_dst.register(dc, "gpu")
        except kvt.FailedPrecondition as e:
            pytest.skip(f"this kvtd has no GPU path: {e}")
        host_dst.register(dc, "host")

        def move(request: str, region: str, scheme: str) -> None:
            dc.expect(request, region, DST_BLOCKS, RESLICE_TOKENS)
            pc.offer(request, "src", SRC_BLOCKS, RESLICE_TOKENS, range(src_layout.num_layers), scheme=scheme,
                     decode_daemon=decode.peer_address)
            events = list(dc.watch(request, timeout=60.0))
            assert events[-1].kind is kvt.EventKind.DONE, events

        move("bf16", "gpu", "bf16")
        check(src, gpu_dst)
        move("lynx-gpu", "gpu", "lynx")
        move("lynx-host", "host", "lynx")
        for layer in range(src_layout.num_layers):
            assert torch.equal(gpu_dst.k(layer).cpu(), host_dst.k(layer).cpu())
            assert torch.equal(gpu_dst.v(layer).cpu(), host_dst.v(layer).cpu())
            assert gpu_dst.k(layer).any()
        src.unregister()
        gpu_dst.unregister()
        host_dst.unregister()


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_a_gpu_region_holding_some_of_the_sources_heads_gets_exactly_those(
        start_daemon: Callable[..., kvt.Daemon], order: str) -> None:
    # The source holds heads [0, 3) of 3, the decode region head 1 only.
    src_layout = kvt.KvLayout(num_layers=2, num_blocks=RESLICE_BLOCKS, block_tokens=32, num_kv_heads=3,
                              head_dim=64, order=order)
    dst_layout = dataclasses.replace(src_layout, num_kv_heads=1, head_begin=1, total_kv_heads=3)

    def check(src: kvt.KvCache, dst: kvt.KvCache) -> None:
        for layer in range(2):
            for got, want in ((dst.k(layer), src.k(layer)), (dst.v(layer), src.v(layer))):
                assert torch.equal(request_tokens(got, order, DST_BLOCKS, RESLICE_TOKENS),
                                   request_tokens(want, order, SRC_BLOCKS, RESLICE_TOKENS)[:, 1:2])
                # The last block's other tokens, and the block no request uses, stay as they were (zero).
                tail = request_tokens(got, order, DST_BLOCKS, 23 * 32)[RESLICE_TOKENS:]
                assert not tail.any()
                unused = sorted(set(range(RESLICE_BLOCKS)) - set(DST_BLOCKS))
                assert not got[unused].any()

    resliced_transfers(start_daemon, src_layout, dst_layout, seed=4, check=check)


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_a_gpu_region_wider_than_its_source_gets_the_sources_heads_and_keeps_the_others(
        start_daemon: Callable[..., kvt.Daemon], order: str) -> None:
    # Tensor parallelism 2 -> 1: the source rank holds heads [1, 3) of 3, the decode region all 3; head 0 is
    # another rank's to fill and must stay as it was (zero here).
    dst_layout = kvt.KvLayout(num_layers=2, num_blocks=RESLICE_BLOCKS, block_tokens=32, num_kv_heads=3,
                              head_dim=64, order=order)
    src_layout = dataclasses.replace(dst_layout, num_kv_heads=2, head_begin=1, total_kv_heads=3)

    def check(src: kvt.KvCache, dst: kvt.KvCache) -> None:
        for layer in range(2):
            for got, want in ((dst.k(layer), src.k(layer)), (dst.v(layer), src.v(layer))):
                landed = request_tokens(got, order, DST_BLOCKS, RESLICE_TOKENS)
                assert torch.equal(landed[:, 1:3], request_tokens(want, order, SRC_BLOCKS, RESLICE_TOKENS))
                assert not landed[:, 0].any()

    resliced_transfers(start_daemon, src_layout, dst_layout, seed=5, check=check)
