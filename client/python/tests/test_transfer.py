"""Prefill -> decode transfers between two real kvtd processes, through shared-memory KvCaches."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from pathlib import Path
from typing import Callable, List

import numpy as np
import pytest

import kvt
from conftest import Pair
from kv_reference import expected_after_transfer, fill_random, gather

LAYERS = 3
# 512 KiB a layer: about half a second a layer over an 8 Mbit/s link.
SLOW_LAYOUT = kvt.KvLayout(num_layers=4, num_blocks=64, block_tokens=16, num_kv_heads=2, head_dim=64)


def make_layout(tokens_capacity_blocks: int = 24, dtype: str = "bf16", order: str = "NHD") -> kvt.KvLayout:
    return kvt.KvLayout(num_layers=LAYERS, num_blocks=tokens_capacity_blocks, block_tokens=16, num_kv_heads=2,
                        head_dim=64, dtype=dtype, order=order)


def events_of(client: kvt.Client, request_id: str, side: kvt.Side = kvt.Side.UNSPECIFIED) -> List[kvt.TransferEvent]:
    return list(client.watch(request_id, timeout=30.0, side=side))


def register(pair: Pair, ids: Callable[[str], str], src: kvt.KvCache, dst: kvt.KvCache) -> None:
    """`src` on the prefill daemon as ids("src"), `dst` on the decode daemon as ids("dst")."""
    src.register(pair.prefill_client, ids("src"))
    dst.register(pair.decode_client, ids("dst"))


def check_decode_events(events: List[kvt.TransferEvent], layers: int) -> None:
    """Each layer's ANCHOR_READY comes before its FULL_READY; DONE is last and only once."""
    assert events[-1].kind is kvt.EventKind.DONE, events
    assert [e.kind for e in events].count(kvt.EventKind.DONE) == 1
    for layer in range(layers):
        kinds = [e.kind for e in events if e.layer == layer and e.kind in (kvt.EventKind.ANCHOR_READY,
                                                                           kvt.EventKind.FULL_READY)]
        assert kinds == [kvt.EventKind.ANCHOR_READY, kvt.EventKind.FULL_READY], (layer, events)
    assert all(a.at_us <= b.at_us for a, b in zip(events, events[1:]))


@pytest.mark.parametrize("scheme,dtype,order,tokens", [
    ("bf16", "bf16", "NHD", 200),
    ("int8", "bf16", "NHD", 300),
    ("lynx", "bf16", "NHD", 300),
    ("lynx", "fp16", "HND", 77),
    ("int8", "fp32", "HND", 40),
])
def test_transfer_writes_what_the_codec_decodes(pair: Pair, ids: Callable[[str], str], kvtctl_path: str,
                                                tmp_path: Path, scheme: str, dtype: str, order: str,
                                                tokens: int) -> None:
    layout = make_layout(dtype=dtype, order=order)
    blocks_needed = -(-tokens // layout.block_tokens)
    # Different blocks on each side, in scrambled order: the request's token order is the block list's.
    src_blocks = list(range(layout.num_blocks - 1, layout.num_blocks - 1 - blocks_needed, -1))
    dst_blocks = [(5 * i + 1) % layout.num_blocks for i in range(blocks_needed)]
    assert len(set(dst_blocks)) == blocks_needed
    with kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        fill_random(src, seed=7)
        register(pair, ids, src, dst)
        pair.decode_client.expect(ids("r"), ids("dst"), dst_blocks, tokens, source_daemon=pair.prefill.daemon_id)
        pair.prefill_client.offer(ids("r"), ids("src"), src_blocks, tokens, range(LAYERS), scheme=scheme,
                                  decode_daemon=pair.decode.peer_address)
        check_decode_events(events_of(pair.decode_client, ids("r")), LAYERS)
        prefill_events = events_of(pair.prefill_client, ids("r"))
        assert [e.kind for e in prefill_events] == [kvt.EventKind.FULL_READY] * LAYERS + [kvt.EventKind.DONE]

        source = gather(src, src_blocks, tokens)
        received = gather(dst, dst_blocks, tokens)
        expected = expected_after_transfer(kvtctl_path, scheme, source, src.layout.dtype, tmp_path)
        np.testing.assert_array_equal(received, expected)
        if scheme == "bf16" and dtype == "bf16":
            np.testing.assert_array_equal(received, source)  # lossless
        else:
            # Lossy, but close: an 8-bit code's error is a small share of each value's range.
            assert np.abs(received - source).max() <= 0.05 * np.abs(source).max()
        untouched = np.setdiff1d(np.arange(layout.num_blocks), dst_blocks)
        assert not dst.k_numpy(0)[untouched].any() and not dst.v_numpy(LAYERS - 1)[untouched].any()


@pytest.mark.parametrize("scheme,order", [("bf16", "NHD"), ("lynx", "HND")])
def test_a_wider_decode_region_is_filled_by_one_request_per_narrower_source(
        pair: Pair, ids: Callable[[str], str], kvtctl_path: str, tmp_path: Path, scheme: str, order: str) -> None:
    # Tensor parallelism 2 -> 1: two prefill ranks hold heads [0, 2) and [2, 4) of 4; the decode region holds all
    # 4, and each rank's request fills its heads of the same blocks.
    full = kvt.KvLayout(num_layers=LAYERS, num_blocks=24, block_tokens=16, num_kv_heads=4, head_dim=64, order=order)
    halves = [dataclasses.replace(full, num_kv_heads=2, head_begin=2 * r, total_kv_heads=4) for r in range(2)]
    tokens, blocks = 150, [3, 17, 5, 9, 0, 21, 11, 14, 2, 20]
    with kvt.KvCache.allocate(halves[0]) as src0, kvt.KvCache.allocate(halves[1]) as src1, \
            kvt.KvCache.allocate(full) as dst:
        for r, src in enumerate((src0, src1)):
            fill_random(src, seed=20 + r)
            src.register(pair.prefill_client, ids(f"src{r}"))
        dst.register(pair.decode_client, ids("dst"))
        for r in range(2):
            pair.decode_client.expect(ids(f"r{r}"), ids("dst"), blocks, tokens, source_daemon=pair.prefill.daemon_id)
            pair.prefill_client.offer(ids(f"r{r}"), ids(f"src{r}"), blocks, tokens, range(LAYERS), scheme=scheme,
                                      decode_daemon=pair.decode.peer_address)
        for r in range(2):
            assert events_of(pair.decode_client, ids(f"r{r}"))[-1].kind is kvt.EventKind.DONE
        received = gather(dst, blocks, tokens)
        for r, src in enumerate((src0, src1)):
            source = gather(src, blocks, tokens)
            expected = expected_after_transfer(kvtctl_path, scheme, source, src.layout.dtype, tmp_path)
            np.testing.assert_array_equal(received[:, :, :, 2 * r:2 * r + 2], expected)
        # A source that shares no head with the region is refused, with what to fix: a region of heads [0, 2)
        # of 4 and a source of heads [2, 4); and so is a source of another model (8 heads in all).
        narrow = dataclasses.replace(full, num_kv_heads=2, head_begin=0, total_kv_heads=4)
        other_model = dataclasses.replace(full, num_kv_heads=2, head_begin=0, total_kv_heads=8)
        with kvt.KvCache.allocate(narrow) as dst2, kvt.KvCache.allocate(other_model) as src8:
            dst2.register(pair.decode_client, ids("dst2"))
            src8.register(pair.prefill_client, ids("src8"))
            for name, source, region, want in (("bad", "src1", "dst2", "must share some"),
                                               ("bad8", "src8", "dst", "total_kv_heads must agree")):
                pair.decode_client.expect(ids(name), ids(region), blocks, tokens,
                                          source_daemon=pair.prefill.daemon_id)
                pair.prefill_client.offer(ids(name), ids(source), blocks, tokens, range(LAYERS), scheme=scheme,
                                          decode_daemon=pair.decode.peer_address)
                # The prefill side is told why; the decode side's expectation stays for a matching source until
                # its deadline (a wrong peer cannot end it), so cancel it.
                last = events_of(pair.prefill_client, ids(name))[-1]
                assert last.kind is kvt.EventKind.FAILED
                assert want in str(last.error()), last
                pair.decode_client.cancel(ids(name))


def test_transfer_counts_in_both_daemons_stats(pair: Pair, ids: Callable[[str], str]) -> None:
    layout = make_layout()
    prefill_before, decode_before = pair.prefill_client.stats(), pair.decode_client.stats()
    with kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        fill_random(src, seed=1)
        register(pair, ids, src, dst)
        pair.decode_client.expect(ids("s"), ids("dst"), range(4), 64)
        pair.prefill_client.offer(ids("s"), ids("src"), range(4), 64, range(LAYERS), scheme="lynx",
                                  decode_daemon=pair.decode.peer_address)
        pair.decode_client.wait_for_layer(ids("s"), LAYERS - 1, stage="full", timeout=30.0)
        events_of(pair.prefill_client, ids("s"))  # until the prefill side is DONE too
        prefill, decode = pair.prefill_client.stats(), pair.decode_client.stats()
    assert prefill.daemon_id == "prefill" and decode.daemon_id == "decode"
    assert prefill.transfers_done == prefill_before.transfers_done + 1
    assert decode.transfers_done == decode_before.transfers_done + 1
    anchor = prefill.anchor_bytes_sent - prefill_before.anchor_bytes_sent
    residual = prefill.residual_bytes_sent - prefill_before.residual_bytes_sent
    assert anchor > 0 and residual > 0
    assert decode.bytes_received - decode_before.bytes_received >= anchor + residual
    assert decode.chunks_rejected == decode_before.chunks_rejected and decode.in_flight == 0


def test_profile_says_where_each_side_spent_the_transfer(pair: Pair, ids: Callable[[str], str]) -> None:
    layout = make_layout()
    with kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        fill_random(src, seed=2)
        register(pair, ids, src, dst)
        pair.decode_client.expect(ids("p"), ids("dst"), range(4), 64)
        pair.prefill_client.offer(ids("p"), ids("src"), range(4), 64, range(LAYERS), scheme="lynx",
                                  decode_daemon=pair.decode.peer_address)
        check_decode_events(events_of(pair.decode_client, ids("p")), LAYERS)
        events_of(pair.prefill_client, ids("p"))  # until the prefill side is DONE too
        prefill = pair.prefill_client.profile(ids("p"))
        decode = pair.decode_client.profile(ids("p"), side=kvt.Side.DECODE)
    assert prefill.request_id == ids("p") and prefill.side is kvt.Side.PREFILL and prefill.finished
    assert decode.side is kvt.Side.DECODE and decode.finished
    assert prefill.stages["encode"].count == LAYERS and prefill.stages["send"].count == LAYERS
    # (decode_anchor only when a page's anchor is decoded before its residual lands, which a fast link may not
    # leave time for.)
    for stage in ("rendezvous", "arrive_anchor", "arrive_residual", "decode_full"):
        assert stage in decode.stages and decode.stages[stage].count > 0, (stage, decode.stages)
    # What arrived on the two lanes is what was sent, and each stage's span lies in order inside the request.
    sent = prefill.stages["send"].bytes
    assert sent > 0 and decode.stages["arrive_anchor"].bytes + decode.stages["arrive_residual"].bytes == sent
    for t in list(prefill.stages.values()) + list(decode.stages.values()):
        assert t.first_start_us <= t.last_end_us


def test_layers_offered_one_by_one_arrive_one_by_one(pair: Pair, ids: Callable[[str], str]) -> None:
    layout = make_layout()
    blocks, tokens, rid = list(range(5)), 70, ids("l")
    with kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        fill_random(src, seed=3)
        register(pair, ids, src, dst)
        pair.decode_client.expect(rid, ids("dst"), blocks, tokens)
        for layer in range(LAYERS):
            pair.prefill_client.offer(rid, ids("src"), blocks, tokens, [layer], scheme="bf16",
                                      decode_daemon=pair.decode.peer_address)
            event = pair.decode_client.wait_for_layer(rid, layer, stage="full", timeout=30.0)
            assert event.kind is kvt.EventKind.FULL_READY and event.layer == layer
            if layer + 1 < LAYERS:  # the next layer was not offered yet: it cannot be there
                with pytest.raises(kvt.DeadlineExceeded, match=f"layer {layer + 1} of request {rid}"):
                    pair.decode_client.wait_for_layer(rid, layer + 1, stage="anchor", timeout=0.2)
                assert not dst.k_numpy(layer + 1).any()
            np.testing.assert_array_equal(gather(dst, blocks, tokens)[layer], gather(src, blocks, tokens)[layer])
        assert events_of(pair.decode_client, rid)[-1].kind is kvt.EventKind.DONE


def test_many_concurrent_requests_all_arrive_intact(pair: Pair, ids: Callable[[str], str]) -> None:
    requests, blocks_each, tokens = 16, 2, 20
    layout = make_layout(tokens_capacity_blocks=requests * blocks_each)
    done_before = pair.decode_client.stats().transfers_done
    with kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        fill_random(src, seed=5)
        register(pair, ids, src, dst)

        def transfer(i: int) -> kvt.TransferEvent:
            blocks = list(range(i * blocks_each, (i + 1) * blocks_each))
            rid = ids(f"many-{i}")
            pair.decode_client.expect(rid, ids("dst"), blocks, tokens)
            pair.prefill_client.offer(rid, ids("src"), blocks, tokens, range(LAYERS), scheme="int8",
                                      decode_daemon=pair.decode.peer_address)
            return events_of(pair.decode_client, rid)[-1]

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            last_events = list(pool.map(transfer, range(requests)))
        assert all(e.kind is kvt.EventKind.DONE for e in last_events), last_events
        for i in range(requests):
            blocks = list(range(i * blocks_each, (i + 1) * blocks_each))
            received, source = gather(dst, blocks, tokens), gather(src, blocks, tokens)
            assert np.abs(received - source).max() <= 0.05 * np.abs(source).max(), i  # int8: close
        assert pair.decode_client.stats().transfers_done == done_before + requests


def test_cancel_on_prefill_fails_the_request_on_both_sides(start_daemon) -> None:  # type: ignore[no-untyped-def]
    # A slow link (8 Mbit/s) keeps the 2 MiB transfer in flight for seconds: long enough to cancel it.
    prefill = start_daemon("prefill", extra=["--rate_gbps=0.008"])
    decode = start_daemon("decode")
    layout = SLOW_LAYOUT
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc, \
            kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        fill_random(src, seed=9)
        src.register(pc, "src")
        dst.register(dc, "dst")
        dc.expect("c", "dst", range(64), 1024)
        pc.offer("c", "src", range(64), 1024, range(4), scheme="bf16", decode_daemon=decode.peer_address)
        pc.cancel("c")
        pc.cancel("c")  # idempotent
        with pytest.raises(kvt.Cancelled):
            dc.wait_for_layer("c", 3, stage="full", timeout=10.0)
        last = events_of(dc, "c")[-1]
        assert last.kind is kvt.EventKind.FAILED
        assert isinstance(last.error(), kvt.Cancelled)
        assert pc.stats().transfers_cancelled == 1
        deadline = time.monotonic() + 10
        while dc.stats().in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        dst.unregister()  # no request holds the region any more


def test_region_in_use_cannot_be_unregistered_until_cancelled(pair: Pair, ids: Callable[[str], str]) -> None:
    layout = make_layout()
    regions = pair.decode_client.stats().regions
    dst = kvt.KvCache.allocate(layout)
    dst.register(pair.decode_client, ids("dst"))
    pair.decode_client.expect(ids("busy"), ids("dst"), [0], 16)
    with pytest.raises(kvt.FailedPrecondition, match="in use"):
        dst.close()
    assert not dst.closed and dst.region_id == ids("dst")  # memory kept while the daemon may write it
    dst.k_numpy(0)[0] = 1  # still mapped
    pair.decode_client.cancel(ids("busy"))
    dst.close()
    assert dst.closed and pair.decode_client.stats().regions == regions


def test_wrong_source_daemon_is_refused(pair: Pair, ids: Callable[[str], str]) -> None:
    layout = make_layout()
    with kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        register(pair, ids, src, dst)
        pair.decode_client.expect(ids("w"), ids("dst"), [0], 16, source_daemon="someone-else")
        pair.prefill_client.offer(ids("w"), ids("src"), [0], 16, [0], decode_daemon=pair.decode.peer_address)
        with pytest.raises(kvt.PermissionDenied, match="someone-else"):
            pair.prefill_client.wait_for_layer(ids("w"), 0, timeout=10.0)
        pair.decode_client.cancel(ids("w"))


def test_offer_without_expect_fails_at_its_deadline(pair: Pair, ids: Callable[[str], str]) -> None:
    layout = make_layout()
    with kvt.KvCache.allocate(layout) as src:
        src.register(pair.prefill_client, ids("src"))
        pair.prefill_client.offer(ids("lonely"), ids("src"), [0], 16, [0], decode_daemon=pair.decode.peer_address,
                                  deadline=0.5)
        with pytest.raises(kvt.DeadlineExceeded):  # "no Expect ... in time", or its OpenTransfer call timing out
            pair.prefill_client.wait_for_layer(ids("lonely"), 0, timeout=10.0)


def test_killed_decode_daemon_fails_the_transfer_with_unavailable(start_daemon) -> None:  # type: ignore[no-untyped-def]
    prefill = start_daemon("prefill", extra=["--rate_gbps=0.008"])
    decode = start_daemon("decode")
    layout = SLOW_LAYOUT
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc, \
            kvt.KvCache.allocate(layout) as src, kvt.KvCache.allocate(layout) as dst:
        src.register(pc, "src")
        dst.register(dc, "dst")
        dc.expect("k", "dst", range(64), 1024)
        pc.offer("k", "src", range(64), 1024, range(4), scheme="bf16", decode_daemon=decode.peer_address)
        dc.wait_for_layer("k", 0, stage="anchor", timeout=20.0)
        decode.kill()
        with pytest.raises(kvt.Unavailable):
            pc.wait_for_layer("k", 3, stage="full", timeout=20.0)
        with pytest.raises(kvt.Unavailable):
            dc.stats()
