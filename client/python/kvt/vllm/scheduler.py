"""The scheduler-side half of KvtConnector: which requests load or save KV through kvt, in which blocks.

Request parameters (`kv_transfer_params`, as vLLM's NIXL connector uses them; a proxy sets them):
- prefill instance: `{"do_remote_decode": true, "kvt_decode_daemon": "host:port" or a daemon id (with etcd),
  "kvt_transfer_id": "...", "kvt_decode_tp_size": N}`
  (`kvt_transfer_id` defaults to the request id, `kvt_decode_tp_size` to this instance's TP size). When the
  request finishes, `request_finished` returns the parameters the decode instance needs: `{"do_remote_prefill":
  true, "kvt_transfer_id", "kvt_num_tokens", "kvt_source_daemon", "kvt_prefill_tp_size"}`.
- decode instance: those parameters. A proxy that knows both ends may send them to both instances at once (the
  prefill kvtd then streams layers as they are computed, and the decode kvtd waits for them).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kvt.vllm.config import KvtConnectorConfig
from kvt.vllm.metadata import KvtConnectorMetadata, LoadSpec, SaveSpec
from kvt.vllm.tp import TpPlan

_LOG = logging.getLogger("kvt.vllm")
_FINISHED_OK = ("FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED")


@dataclass
class _Producing:
    """A prefill request whose KV goes to a decode instance."""
    transfer_id: str
    decode_daemon: str
    num_tokens: int
    decode_tp_size: int
    block_ids: List[int] = field(default_factory=list)
    saved: bool = False  # its SaveSpec went to the workers


class KvtScheduler:
    def __init__(self, config: KvtConnectorConfig, block_size: int, tp_size: int = 1,
                 total_kv_heads: int = 0) -> None:
        if block_size <= 0:
            raise ValueError(f"KvtConnector: cache block_size must be positive, got {block_size}")
        if tp_size <= 0:
            raise ValueError(f"KvtConnector: tensor-parallel size must be positive, got {tp_size}")
        self._config = config
        self._block_size = block_size
        self._tp_size = tp_size
        self._total_kv_heads = total_kv_heads  # the model's, from vLLM's model config; 0: unknown here
        self._producing: Dict[str, _Producing] = {}
        self._loading: Dict[str, str] = {}  # vLLM request id -> transfer id, until the workers report it
        # Mode "anchor": requests handed back at the anchor whose residual may still be landing in their blocks;
        # request_finished keeps their blocks until the workers report the transfer over (get_finished).
        self._anchor_loaded: set = set()
        self._meta = KvtConnectorMetadata()

    # --- decode side -----------------------------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[int, bool]:
        params = request.kv_transfer_params or {}
        if not params.get("do_remote_prefill"):
            return 0, False
        prompt_len = len(request.prompt_token_ids or ())
        num_tokens = _int_param(params, "kvt_num_tokens", prompt_len)
        if not 0 < num_tokens <= prompt_len:
            _LOG.error("request %s: kvt_num_tokens %d is not in 1..%d (the prompt); computing it locally",
                       request.request_id, num_tokens, prompt_len)
            return 0, False
        _, why = self._other_tp_size("kvt_prefill_tp_size", params, prefill=True)
        if why:
            _LOG.error("request %s: %s; computing it locally", request.request_id, why)
            return 0, False
        if num_computed_tokens > 0:
            # kvt writes the whole prompt's KV; blocks this instance already holds (a prefix-cache hit) may be
            # shared with other requests and must not be overwritten. docs/VLLM.md: run decode instances with
            # --no-enable-prefix-caching; here the request is recomputed and the prefill side's transfer ends
            # at its deadline.
            _LOG.warning("request %s: %d tokens already cached locally; kvt loads whole prompts only, so this "
                         "one is computed here", request.request_id, num_computed_tokens)
            return 0, False
        return num_tokens, True

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        params = request.kv_transfer_params or {}
        if params.get("do_remote_decode") and self._config.is_producer:
            self._track_producing(request, params)
        if not params.get("do_remote_prefill") or num_external_tokens <= 0:
            return
        transfer_id = str(params.get("kvt_transfer_id") or request.request_id)
        prefill_tp = _int_param(params, "kvt_prefill_tp_size", self._tp_size)  # checked in get_num_new_matched
        block_ids = _first_group(blocks.get_block_ids())
        needed = -(-num_external_tokens // self._block_size)
        if len(block_ids) < needed:
            raise ValueError(f"request {request.request_id}: {len(block_ids)} blocks for {num_external_tokens} "
                             f"tokens of {self._block_size}")
        self._meta.loads.append(LoadSpec(request_id=request.request_id, transfer_id=transfer_id,
                                         block_ids=tuple(block_ids[:needed]), num_tokens=num_external_tokens,
                                         source_daemon=str(params.get("kvt_source_daemon", "")),
                                         prefill_tp_size=prefill_tp))
        self._loading[request.request_id] = transfer_id
        if self._config.mode == "anchor":
            self._anchor_loaded.add(request.request_id)
        params["do_remote_prefill"] = False  # handled: a re-entry (preemption) must not load twice

    # --- prefill side ----------------------------------------------------------------------------------------

    def _track_producing(self, request: Any, params: Dict[str, Any]) -> None:
        if request.request_id in self._producing:
            return
        daemon = params.get("kvt_decode_daemon")
        if not isinstance(daemon, str) or not daemon:
            _LOG.error("request %s: do_remote_decode without kvt_decode_daemon (\"host:port\" of the decode "
                       "instance's kvtd); its KV is not sent", request.request_id)
            return
        decode_tp, why = self._other_tp_size("kvt_decode_tp_size", params, prefill=False)
        if why:
            _LOG.error("request %s: %s; its KV is not sent", request.request_id, why)
            return
        self._producing[request.request_id] = _Producing(
            transfer_id=str(params.get("kvt_transfer_id") or request.request_id), decode_daemon=daemon,
            num_tokens=len(request.prompt_token_ids or ()), decode_tp_size=decode_tp)

    def build_connector_meta(self, scheduler_output: Any) -> KvtConnectorMetadata:
        """The step's loads, saves and cancels; resets them. Saves are emitted in the step that completes a
        producing request's prompt (with chunked prefill, its last chunk)."""
        scheduled = getattr(scheduler_output, "num_scheduled_tokens", {}) or {}
        for new in getattr(scheduler_output, "scheduled_new_reqs", ()) or ():
            producing = self._producing.get(new.req_id)
            if producing is not None:
                producing.block_ids = list(_first_group(new.block_ids))
                self._maybe_save(new.req_id, producing, new.num_computed_tokens + scheduled.get(new.req_id, 0))
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None:
            for i, req_id in enumerate(cached.req_ids):
                producing = self._producing.get(req_id)
                if producing is None:
                    continue
                new_ids = cached.new_block_ids[i]
                if new_ids is not None:
                    if _resumed(cached, i, req_id):  # after a preemption the new ids replace the freed ones
                        producing.block_ids = list(_first_group(new_ids))
                    else:
                        producing.block_ids.extend(_first_group(new_ids))
                self._maybe_save(req_id, producing, cached.num_computed_tokens[i] + scheduled.get(req_id, 0))
        meta, self._meta = self._meta, KvtConnectorMetadata()
        return meta

    def _maybe_save(self, req_id: str, producing: _Producing, computed_after_step: int) -> None:
        if producing.saved or computed_after_step < producing.num_tokens:
            return
        needed = -(-producing.num_tokens // self._block_size)
        if len(producing.block_ids) < needed:
            _LOG.error("request %s: %d blocks for %d tokens; its KV is not sent", req_id,
                       len(producing.block_ids), producing.num_tokens)
            return
        self._meta.saves.append(SaveSpec(request_id=req_id, transfer_id=producing.transfer_id,
                                         block_ids=tuple(producing.block_ids[:needed]),
                                         num_tokens=producing.num_tokens, decode_daemon=producing.decode_daemon,
                                         decode_tp_size=producing.decode_tp_size))
        producing.saved = True

    # --- both ------------------------------------------------------------------------------------------------

    def _other_tp_size(self, key: str, params: Dict[str, Any], prefill: bool) -> Tuple[int, str]:
        """The other instance's TP size in `params[key]` (default: this instance's), and why it cannot pair with
        this one, or "" if it can (checked against the model's KV heads where vLLM gave them)."""
        other = _int_param(params, key, self._tp_size)
        if other <= 0:
            return other, f"{key} must be a positive integer (the other instance's tensor-parallel size), got " \
                          f"{params.get(key)!r}"
        if self._total_kv_heads:
            try:
                TpPlan(other if prefill else self._tp_size, self._tp_size if prefill else other,
                       self._total_kv_heads)
            except ValueError as e:
                return other, (f"{key} {other} cannot pair with this instance's tensor-parallel size "
                               f"{self._tp_size}: {e}")
        return other, ""

    def update_connector_output(self, connector_output: Any) -> None:
        for req_id in getattr(connector_output, "finished_recving", None) or ():
            self._loading.pop(req_id, None)

    def request_finished(self, request: Any, block_ids: Sequence[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """Prefill: keeps the blocks until the workers report the send finished (get_finished), and returns the
        decode instance's parameters. A request aborted mid-transfer (either side) is cancelled in both kvtd and
        its blocks are kept until the cancel has settled."""
        status = getattr(getattr(request, "status", None), "name", str(getattr(request, "status", "")))
        loading = self._loading.pop(request.request_id, None)
        anchor_loaded = request.request_id in self._anchor_loaded
        self._anchor_loaded.discard(request.request_id)
        if loading is not None:
            self._meta.cancels.append((request.request_id, loading))
            return True, None
        if anchor_loaded:
            return True, None
        producing = self._producing.pop(request.request_id, None)
        if producing is None or not producing.saved:
            return False, None
        if status not in _FINISHED_OK:
            self._meta.cancels.append((request.request_id, producing.transfer_id))
            return True, None
        return True, {"do_remote_prefill": True, "do_remote_decode": False,
                      "kvt_transfer_id": producing.transfer_id, "kvt_num_tokens": producing.num_tokens,
                      "kvt_source_daemon": self._config.daemon_id, "kvt_prefill_tp_size": self._tp_size}

    def has_pending_work(self) -> bool:
        return bool(self._meta.loads or self._meta.saves or self._meta.cancels)


def _first_group(block_ids: Any) -> List[int]:
    """vLLM gives block ids per KV-cache group (a tuple of lists); kvt moves the attention group, the first."""
    if len(block_ids) and not isinstance(block_ids[0], int):
        return [int(b) for b in block_ids[0]]
    return [int(b) for b in block_ids]


def _resumed(cached: Any, i: int, req_id: str) -> bool:
    """Whether vLLM resumed this cached request from preemption (its block ids start over): older vLLM has
    `resumed_from_preemption` per request, newer a `resumed_req_ids` set."""
    flags = getattr(cached, "resumed_from_preemption", None)
    if flags is not None:
        return bool(flags[i])
    return req_id in (getattr(cached, "resumed_req_ids", None) or ())


def _int_param(params: Dict[str, Any], key: str, default: int) -> int:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        return -1
    return value


__all__ = ["KvtScheduler"]
