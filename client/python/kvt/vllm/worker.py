"""The worker-side half of KvtConnector: offers and expects each layer through the local kvtd, and tells vLLM
which requests finished sending or receiving.

One kvt request per (transfer, layer), id `"<transfer_id>/L<layer>"`, because vLLM keeps every layer in its own
allocation and a kvt region is one allocation. The daemons' anchor-first lanes order all of them together, so
every layer's anchor still goes before any residual. Threads: the sender issues offers in layer order (after the
layer's CUDA work, or after copying host blocks to their mirror); one watcher per request follows its layers'
events to the stage the mode asks for, then to DONE. Every wait is bounded by the config's deadline.
"""
from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from kvt.client import Client, EventKind, Side
from kvt.errors import KvtError, NotFound
from kvt.vllm.binding import LayerBinding, layer_order
from kvt.vllm.config import KvtConnectorConfig
from kvt.vllm.metadata import KvtConnectorMetadata, LoadSpec, SaveSpec

_LOG = logging.getLogger("kvt.vllm")


def layer_request_id(transfer_id: str, layer: int) -> str:
    return f"{transfer_id}/L{layer}"


@dataclass
class _Sending:
    spec: SaveSpec
    offered: Set[int] = field(default_factory=set)
    failed: bool = False
    done: bool = False  # every layer DONE or FAILED on the prefill kvtd


class KvtWorker:
    def __init__(self, config: KvtConnectorConfig) -> None:
        self._config = config
        self._client = Client(config.kvtd_socket, connect_timeout=config.connect_timeout_s)
        self._layers: List[LayerBinding] = []
        self._index: Dict[str, int] = {}
        self._mu = threading.Lock()
        self._sending: Dict[str, _Sending] = {}  # by vLLM request id
        self._recv_done: Set[str] = set()  # vLLM request ids whose KV is in their blocks (or failed)
        self._send_done: Set[str] = set()
        self._finished_seen: Set[str] = set()  # ids vLLM passed to get_finished (sends may be reported)
        self._load_errors: Set[int] = set()
        self._cancelled: Set[str] = set()  # aborted loads: reported as sent once their watchers end
        self._loads_active: Dict[str, str] = {}  # vLLM request id -> transfer id, between Expect and the report
        self._step_saves: List[SaveSpec] = []
        self._offers: "queue.Queue[Optional[Tuple[SaveSpec, int, Any]]]" = queue.Queue()
        self._step_pending = 0
        self._step_cv = threading.Condition(self._mu)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="kvt-vllm-watch")
        self._sender = threading.Thread(target=self._send_loop, name="kvt-vllm-offer", daemon=True)
        self._sender.start()
        self._closed = False

    # --- caches ----------------------------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        if self._layers:
            raise RuntimeError("KvtConnector: register_kv_caches called twice")
        if not kv_caches:
            raise ValueError("KvtConnector: no KV caches to register")
        prefix = f"vllm-{id(self):x}"
        for i, name in enumerate(layer_order(list(kv_caches))):
            self._layers.append(LayerBinding(self._client, f"{prefix}-L{i}", kv_caches[name]))
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
            self._finished_seen |= set(finished_req_ids)
            sent = self._send_done & self._finished_seen
            self._send_done -= sent
            self._finished_seen -= sent
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
            finally:
                with self._step_cv:
                    self._step_pending -= 1
                    self._step_cv.notify_all()

    def _offer(self, spec: SaveSpec, layer: int, event: Any) -> None:
        with self._mu:
            sending = self._sending.get(spec.request_id)
        if sending is None or sending.failed:
            return
        try:
            if event is not None:
                event.synchronize()
            binding = self._layers[layer]
            binding.stage_out(spec.block_ids)
            self._client.offer(layer_request_id(spec.transfer_id, layer), binding.region_id, spec.block_ids,
                               spec.num_tokens, ready_layers=[0], scheme=self._config.scheme,
                               decode_daemon=spec.decode_daemon, deadline=self._config.deadline_s)
        except KvtError as e:
            _LOG.error("kvt: offer of %s layer %d failed: %s", spec.request_id, layer, e)
            with self._mu:
                sending.failed = True
        with self._mu:
            sending.offered.add(layer)
            complete = len(sending.offered) == len(self._layers)
        if complete:
            self._pool.submit(self._watch_send, sending)

    def _watch_send(self, sending: _Sending) -> None:
        for layer in range(len(self._layers)):
            self._follow(layer_request_id(sending.spec.transfer_id, layer), Side.PREFILL, EventKind.DONE)
        with self._mu:
            sending.done = True
            self._sending.pop(sending.spec.request_id, None)
            self._send_done.add(sending.spec.request_id)

    # --- loads -----------------------------------------------------------------------------------------------

    def _start_load(self, spec: LoadSpec) -> None:
        with self._mu:
            self._loads_active[spec.request_id] = spec.transfer_id
        expected: List[int] = []
        try:
            for layer, binding in enumerate(self._layers):
                self._client.expect(layer_request_id(spec.transfer_id, layer), binding.region_id, spec.block_ids,
                                    spec.num_tokens, source_daemon=spec.source_daemon,
                                    deadline=self._config.deadline_s,
                                    allow_anchor_only=self._config.mode == "anchor")
                expected.append(layer)
        except KvtError as e:
            _LOG.error("kvt: expect of %s failed: %s", spec.request_id, e)
            for layer in expected:
                self._cancel_one(layer_request_id(spec.transfer_id, layer))
            self._finish_load(spec, ok=False)
            return
        self._pool.submit(self._watch_load, spec)

    def _watch_load(self, spec: LoadSpec) -> None:
        want = EventKind.ANCHOR_READY if self._config.mode == "anchor" else EventKind.DONE
        ok = all([self._follow(layer_request_id(spec.transfer_id, layer), Side.DECODE, want)
                  for layer in range(len(self._layers))])
        self._finish_load(spec, ok)
        if ok and want is not EventKind.DONE:  # the residual lands in place; host mirrors copy it once more
            done = all([self._follow(layer_request_id(spec.transfer_id, layer), Side.DECODE, EventKind.DONE)
                        for layer in range(len(self._layers))])
            if done:
                for binding in self._layers:
                    binding.stage_in(spec.block_ids)

    def _finish_load(self, spec: LoadSpec, ok: bool) -> None:
        if ok:
            for binding in self._layers:
                binding.stage_in(spec.block_ids)
        with self._mu:
            if not ok:
                self._load_errors.update(spec.block_ids)
            self._recv_done.add(spec.request_id)
            self._loads_active.pop(spec.request_id, None)
            if spec.request_id in self._cancelled:  # vLLM holds its blocks until it sees it "sent"
                self._cancelled.discard(spec.request_id)
                self._send_done.add(spec.request_id)

    def _follow(self, request_id: str, side: Side, want: EventKind) -> bool:
        """Follows one kvt request's events until `want` (ANCHOR_READY also accepts FULL_READY) or its end.
        True if `want` was reached; False on FAILED, an error or the deadline."""
        accept = {want, EventKind.FULL_READY} if want is EventKind.ANCHOR_READY else {want}
        try:
            for event in self._client.watch(request_id, timeout=self._config.deadline_s + 5.0, side=side):
                if event.kind in accept:
                    return True
                if event.kind is EventKind.FAILED:
                    _LOG.error("kvt: %s failed: %s", request_id, event.error())
                    return False
        except KvtError as e:
            _LOG.error("kvt: watching %s: %s", request_id, e)
        return False

    # --- cancel and shutdown ---------------------------------------------------------------------------------

    def _cancel(self, transfer_id: str) -> None:
        for layer in range(len(self._layers)):
            self._cancel_one(layer_request_id(transfer_id, layer))

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
        for binding in self._layers:
            try:
                binding.close(self._client)
            except KvtError as e:
                _LOG.warning("kvt: closing region %s: %s", binding.region_id, e)
        self._client.close()
