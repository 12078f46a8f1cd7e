"""The worker-side half of KvtConnector: offers and expects each layer through the local kvtd, and tells vLLM
which requests finished sending or receiving.

One kvt request per (transfer, prefill rank, decode rank, layer), id `"<transfer_id>/p<rank>d<rank>/L<layer>"`
(tp.py: the rank pairs whose KV heads overlap, so that instances of different tensor-parallel sizes exchange each
head once; kvtd re-slices the heads), because vLLM keeps every layer in its own allocation and a kvt region is one
allocation. The daemons' anchor-first lanes order all of them
together, so every layer's anchor still goes before any residual. Threads: the sender issues offers in layer
order (after the layer's CUDA work, or after copying host blocks to their mirror); a request's watcher follows all
its layers at once (one watch each, attached as soon as the request starts, so no finished layer is missed) to the
stage the mode asks for, then to DONE. Each watch is bounded by the config's deadline (plus 5 s).
"""
from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from kvt.client import Client, EventKind, Side
from kvt.errors import KvtError, NotFound
from kvt.vllm.binding import LayerBinding, layer_order, layout_of
from kvt.vllm.config import KvtConnectorConfig
from kvt.vllm.metadata import KvtConnectorMetadata, LoadSpec, SaveSpec
from kvt.vllm.tp import TpPlan, head_range, request_id as kvt_request_id

_LOG = logging.getLogger("kvt.vllm")


@dataclass(frozen=True)
class TensorParallel:
    """This worker's place in its instance's tensor parallelism."""
    rank: int = 0
    size: int = 1
    total_kv_heads: int = 0  # the model's KV heads; 0: this rank's heads x size (no replicated heads)


def tensor_parallel_of(vllm_config: Any) -> TensorParallel:
    """From vLLM's config and parallel state: the TP size (parallel_config.tensor_parallel_size), this worker's
    rank (vLLM's TP group, else parallel_config.rank within the size) and the model's KV heads
    (model_config.get_total_num_kv_heads()). Outside vLLM, or before its groups exist: rank 0 of 1."""
    parallel = getattr(vllm_config, "parallel_config", None)
    size = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        rank = int(get_tensor_model_parallel_rank())
    except Exception:  # noqa: BLE001 - no vLLM, or no TP group yet
        rank = int(getattr(parallel, "rank", 0) or 0) % size
    total = 0
    model = getattr(vllm_config, "model_config", None)
    if model is not None and hasattr(model, "get_total_num_kv_heads"):
        total = int(model.get_total_num_kv_heads())
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"KvtConnector: vLLM reports tensor-parallel rank {rank} of size {size}; the rank must be "
                         f"in 0..size-1 (check parallel_config.tensor_parallel_size)")
    return TensorParallel(rank=rank, size=size, total_kv_heads=total)


@dataclass
class _Sending:
    spec: SaveSpec
    offered: Set[int] = field(default_factory=set)
    failed: bool = False


class KvtWorker:
    def __init__(self, config: KvtConnectorConfig, tp: TensorParallel = TensorParallel()) -> None:
        self._config = config
        self._tp = tp
        self._rank = tp.rank
        self._total_heads = tp.total_kv_heads
        self._ids: Dict[str, Dict[str, None]] = {}  # transfer id -> its kvt requests here, in order (cancel, watch)
        self._plans: Dict[Tuple[int, int], TpPlan] = {}  # (prefill, decode) TP sizes -> their rank pairs
        self._client = Client(config.kvtd_socket, connect_timeout=config.connect_timeout_s)
        self._layers: List[LayerBinding] = []
        self._index: Dict[str, int] = {}
        self._mu = threading.Lock()
        self._sending: Dict[str, _Sending] = {}  # by vLLM request id
        self._recv_done: Set[str] = set()  # vLLM request ids whose KV is in their blocks (or failed)
        self._send_done: Set[str] = set()
        self._finished_seen: Set[str] = set()  # finished ids of ours vLLM passed to get_finished
        self._landing: Dict[str, bool] = {}  # anchor mode: handed back, residual still landing -> transfer over
        self._load_errors: Set[int] = set()
        self._cancelled: Set[str] = set()  # aborted loads: reported as sent once their watchers end
        self._loads_active: Dict[str, str] = {}  # vLLM request id -> transfer id, between Expect and the report
        self._step_saves: List[SaveSpec] = []
        self._offers: "queue.Queue[Optional[Tuple[SaveSpec, int, Any]]]" = queue.Queue()
        self._step_pending = 0
        self._step_cv = threading.Condition(self._mu)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="kvt-vllm-watch")
        # One watch per layer of every live request: they block on their streams, so they get their own pool.
        self._layer_pool = concurrent.futures.ThreadPoolExecutor(max_workers=512, thread_name_prefix="kvt-vllm-layer")
        self._sender = threading.Thread(target=self._send_loop, name="kvt-vllm-offer", daemon=True)
        self._sender.start()
        self._closed = False

    # --- caches ----------------------------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        if self._layers:
            raise RuntimeError("KvtConnector: register_kv_caches called twice")
        if not kv_caches:
            raise ValueError("KvtConnector: no KV caches to register")
        prefix = f"vllm-{os.getpid()}-r{self._rank}-{id(self):x}"
        names = layer_order(list(kv_caches))
        heads = layout_of(kv_caches[names[0]]).num_kv_heads
        if not self._total_heads:
            self._total_heads = heads * self._tp.size
        begin, end = head_range(self._rank, self._tp.size, self._total_heads)
        if end - begin != heads:
            raise ValueError(f"KvtConnector: TP rank {self._rank} of {self._tp.size} holds {heads} KV heads, where "
                             f"vLLM's sharding of the model's {self._total_heads} gives it {end - begin}")
        for i, name in enumerate(names):
            self._layers.append(LayerBinding(self._client, f"{prefix}-L{i}", kv_caches[name], head_begin=begin,
                                             total_kv_heads=self._total_heads))
            self._index[name] = i
        _LOG.info("kvt: %d layers registered with %s (%s, %s)", len(self._layers), self._config.kvtd_socket,
                  "CUDA IPC" if self._layers[0].on_gpu else "host mirror", self._layers[0].layout.order.value)

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    # --- the step --------------------------------------------------------------------------------------------

    def start_load_kv(self, meta: KvtConnectorMetadata) -> None:
        for request_id, transfer_id in meta.cancels:
            with self._mu:
                if request_id in self._loads_active:
                    self._cancelled.add(request_id)
                elif request_id not in self._sending:  # its load already ended: its blocks are free to go
                    self._send_done.add(request_id)
            self._cancel(transfer_id)
        for spec in meta.loads:
            self._start_load(spec)
        self._step_saves = list(meta.saves)
        with self._mu:
            for spec in meta.saves:
                self._sending[spec.request_id] = _Sending(spec)

    def save_kv_layer(self, layer_name: str, kv_layer: Any) -> None:
        if not self._step_saves:
            return
        layer = self._index.get(layer_name)
        if layer is None:
            raise KeyError(f"KvtConnector: layer {layer_name!r} was not registered")
        event = None
        if self._layers[layer].on_gpu:  # kvtd reads the blocks once the layer's kernels have written them
            import torch
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(kv_layer.device))
        with self._mu:
            self._step_pending += len(self._step_saves)
        for spec in self._step_saves:
            self._offers.put((spec, layer, event))

    def wait_for_save(self) -> None:
        """Until this step's offers are issued (kvtd copies the blocks out later: vLLM keeps them until
        get_finished reports the send)."""
        with self._step_cv:
            self._step_cv.wait_for(lambda: self._step_pending == 0, timeout=self._config.deadline_s)
        self._step_saves = []

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        with self._mu:
            ours = set(self._sending) | self._send_done | self._cancelled | set(self._landing)
            self._finished_seen |= set(finished_req_ids) & ours
            for rid in list(self._landing):  # anchor mode: the blocks go back once the residual has landed
                if self._landing[rid] and rid in self._finished_seen:
                    del self._landing[rid]
                    self._send_done.add(rid)
            sent = self._send_done & self._finished_seen
            self._send_done -= sent
            self._finished_seen -= sent
            for rid in sent:  # reported once: no other path may report it again
                self._landing.pop(rid, None)
                self._cancelled.discard(rid)
            received, self._recv_done = self._recv_done, set()
        return (sent or None), (received or None)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        with self._mu:
            errors, self._load_errors = self._load_errors, set()
        return errors

    # --- offers ----------------------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        while True:
            item = self._offers.get()
            if item is None:
                return
            spec, layer, event = item
            try:
                self._offer(spec, layer, event)
            except Exception:  # noqa: BLE001 - a CUDA or copy error must not end the sender: fail this send
                _LOG.exception("kvt: offer of %s layer %d failed", spec.request_id, layer)
                self._offered(spec, layer, failed=True)
            finally:
                with self._step_cv:
                    self._step_pending -= 1
                    self._step_cv.notify_all()

    def _offer(self, spec: SaveSpec, layer: int, event: Any) -> None:
        with self._mu:
            sending = self._sending.get(spec.request_id)
            failed = sending is not None and sending.failed
        if sending is None:
            return
        if not failed:  # after a failed layer the rest are not offered, but still counted (the send must end)
            try:
                if event is not None:
                    event.synchronize()
                binding = self._layers[layer]
                binding.stage_out(spec.block_ids)
                for kvt_id in self._send_ids(spec, layer):
                    self._client.offer(kvt_id, binding.region_id, spec.block_ids, spec.num_tokens,
                                       ready_layers=[0], scheme=self._config.scheme,
                                       decode_daemon=spec.decode_daemon, deadline=self._config.deadline_s)
            except (KvtError, ValueError) as e:
                _LOG.error("kvt: offer of %s layer %d failed: %s", spec.request_id, layer, e)
                failed = True
                # The layers and rank pairs already offered would wait in the decode kvtd until the deadline.
                self._cancel(spec.transfer_id)
        self._offered(spec, layer, failed)

    def _offered(self, spec: SaveSpec, layer: int, failed: bool) -> None:
        """Counts `layer` of a send as done with (offered or failed); the last one starts the send's watcher."""
        with self._mu:
            sending = self._sending.get(spec.request_id)
            if sending is None or layer in sending.offered:
                return
            sending.failed = sending.failed or failed
            sending.offered.add(layer)
            complete = len(sending.offered) == len(self._layers)
        if complete:
            self._pool.submit(self._watch_send, sending)

    def _plan(self, prefill_size: int, decode_size: int) -> TpPlan:
        """The rank pairs of a transfer (a size of 0 is this instance's); ValueError for sizes the model's heads
        do not allow. One plan a pair of sizes, kept: every layer of every transfer asks."""
        key = (prefill_size or self._tp.size, decode_size or self._tp.size)
        with self._mu:
            plan = self._plans.get(key)
        if plan is None:
            plan = TpPlan(key[0], key[1], self._total_heads)
            with self._mu:
                self._plans[key] = plan
        return plan

    def _send_ids(self, spec: SaveSpec, layer: int) -> List[str]:
        """This prefill rank's kvt requests of one layer: one per decode rank that takes heads from it."""
        peers = self._plan(self._tp.size, spec.decode_tp_size).peers(Side.PREFILL, self._rank)
        ids = [kvt_request_id(spec.transfer_id, self._rank, d, layer) for d in peers]
        self._remember(spec.transfer_id, ids)
        return ids

    def _load_ids(self, spec: LoadSpec, layer: int) -> List[str]:
        """This decode rank's kvt requests of one layer: one per prefill rank it takes heads from."""
        peers = self._plan(spec.prefill_tp_size, self._tp.size).peers(Side.DECODE, self._rank)
        ids = [kvt_request_id(spec.transfer_id, p, self._rank, layer) for p in peers]
        self._remember(spec.transfer_id, ids)
        return ids

    def _remember(self, transfer_id: str, ids: List[str]) -> None:
        with self._mu:
            self._ids.setdefault(transfer_id, {}).update(dict.fromkeys(ids))

    def _follow_all(self, transfer_id: str, side: Side,
                    anchors: bool = False) -> Tuple[List["concurrent.futures.Future[bool]"],
                                                    List["concurrent.futures.Future[bool]"]]:
        """One watch per kvt request of the transfer (a thread of the layer pool each): (futures of DONE, and
        with `anchors` futures set at each request's ANCHOR_READY from the same watch)."""
        with self._mu:
            ids = list(self._ids.get(transfer_id, ()))
        marks = [concurrent.futures.Future() for _ in ids] if anchors else [None] * len(ids)
        dones = [self._layer_pool.submit(self._follow, kvt_id, side, mark) for kvt_id, mark in zip(ids, marks)]
        return dones, [m for m in marks if m is not None]

    def _forget(self, transfer_id: str) -> None:
        with self._mu:
            self._ids.pop(transfer_id, None)

    def _watch_send(self, sending: _Sending) -> None:
        try:
            for future in self._follow_all(sending.spec.transfer_id, Side.PREFILL)[0]:
                future.result()
        finally:
            self._forget(sending.spec.transfer_id)
        with self._mu:
            self._sending.pop(sending.spec.request_id, None)
            self._send_done.add(sending.spec.request_id)

    # --- loads -----------------------------------------------------------------------------------------------

    def _start_load(self, spec: LoadSpec) -> None:
        with self._mu:
            self._loads_active[spec.request_id] = spec.transfer_id
            if self._config.mode == "anchor":  # vLLM keeps its blocks until we say so (scheduler.request_finished)
                self._landing[spec.request_id] = False
        expected: List[str] = []
        try:
            for layer, binding in enumerate(self._layers):
                for kvt_id in self._load_ids(spec, layer):
                    self._client.expect(kvt_id, binding.region_id, spec.block_ids, spec.num_tokens,
                                        source_daemon=spec.source_daemon, deadline=self._config.deadline_s,
                                        allow_anchor_only=self._config.mode == "anchor")
                    expected.append(kvt_id)
        except (KvtError, ValueError) as e:
            _LOG.error("kvt: expect of %s failed: %s", spec.request_id, e)
            for kvt_id in expected:
                self._cancel_one(kvt_id)
            self._finish_load(spec, ok=False)
            self._landed(spec)  # forgets the transfer's ids
            return
        self._pool.submit(self._watch_load, spec)

    def _watch_load(self, spec: LoadSpec) -> None:
        reported = False
        try:
            anchor_mode = self._config.mode == "anchor"
            dones, anchors = self._follow_all(spec.transfer_id, Side.DECODE, anchors=anchor_mode)
            if not anchor_mode:
                self._finish_load(spec, all([f.result() for f in dones]))
                reported = True
                return
            ok = all([f.result() for f in anchors])
            self._finish_load(spec, ok)
            reported = True
            done = all([f.result() for f in dones])  # the residual lands in place
            if ok and done:
                for binding in self._layers:  # host mirrors copy the prompt's tokens once more
                    binding.stage_in(spec.block_ids, spec.num_tokens)
        except Exception:  # noqa: BLE001 - a copy or watch error must not leave vLLM waiting on the request
            _LOG.exception("kvt: load of %s", spec.request_id)
            if not reported:  # a failed load: its blocks are recomputed
                self._finish_load(spec, ok=False)
        finally:
            self._landed(spec)

    def _landed(self, spec: LoadSpec) -> None:
        """The transfer is over (done, failed or cancelled); in anchor mode vLLM may free the blocks once
        finished."""
        self._forget(spec.transfer_id)
        with self._mu:
            if spec.request_id in self._landing:
                self._landing[spec.request_id] = True

    def _finish_load(self, spec: LoadSpec, ok: bool) -> None:
        if ok:
            for binding in self._layers:
                binding.stage_in(spec.block_ids, spec.num_tokens)
        with self._mu:
            if not ok:
                self._load_errors.update(spec.block_ids)
            self._recv_done.add(spec.request_id)
            self._loads_active.pop(spec.request_id, None)
            if spec.request_id in self._cancelled:  # vLLM holds its blocks until it sees it "sent"
                self._cancelled.discard(spec.request_id)
                self._send_done.add(spec.request_id)

    def _follow(self, request_id: str, side: Side,
                anchor: Optional["concurrent.futures.Future[bool]"] = None) -> bool:
        """Follows one kvt request's events to its end. True if it reached DONE; False on FAILED, an error or the
        deadline. `anchor`, if given, is set True at its first ANCHOR_READY or FULL_READY (or DONE), else False."""
        def mark(reached: bool) -> None:
            if anchor is not None and not anchor.done():
                anchor.set_result(reached)

        try:
            for event in self._client.watch(request_id, timeout=self._config.deadline_s + 5.0, side=side):
                if event.kind in (EventKind.ANCHOR_READY, EventKind.FULL_READY):
                    mark(True)
                elif event.kind is EventKind.DONE:
                    mark(True)
                    return True
                elif event.kind is EventKind.FAILED:
                    _LOG.error("kvt: %s failed: %s", request_id, event.error())
                    break
        except KvtError as e:
            _LOG.error("kvt: watching %s: %s", request_id, e)
        finally:
            mark(False)
        return False

    # --- cancel and shutdown ---------------------------------------------------------------------------------

    def _cancel(self, transfer_id: str) -> None:
        with self._mu:
            ids = list(self._ids.get(transfer_id, ()))
        for kvt_id in ids:
            self._cancel_one(kvt_id)

    def _cancel_one(self, request_id: str) -> None:
        try:
            self._client.cancel(request_id)
        except NotFound:
            pass  # never offered / expected here, or already gone
        except KvtError as e:
            _LOG.warning("kvt: cancel of %s: %s", request_id, e)

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._mu:  # transfers still in flight would keep the regions mapped: end them first
            live = list(self._loads_active.values()) + [s.spec.transfer_id for s in self._sending.values()]
        for transfer_id in live:
            self._cancel(transfer_id)
        self._offers.put(None)
        self._sender.join(timeout=self._config.deadline_s)
        self._pool.shutdown(wait=False)
        self._layer_pool.shutdown(wait=False)
        for binding in self._layers:
            try:
                binding.close(self._client)
            except KvtError as e:
                _LOG.warning("kvt: closing region %s: %s", binding.region_id, e)
        self._client.close()
