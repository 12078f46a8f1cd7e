"""A stand-in for the parts of vLLM that drive a KV connector, in vLLM's call order (v1 scheduler and model
runner: get_num_new_matched_tokens -> allocate -> update_state_after_alloc -> build_connector_meta; then in the
worker bind_connector_metadata -> start_load_kv -> per layer wait_for_layer_load / attention / save_kv_layer ->
wait_for_save -> get_finished -> clear_connector_metadata; request_finished when a request ends).

vLLM itself is not installed for these tests: its CUDA wheels and their torch are gigabytes and CI has no GPU
(docs/VLLM.md). Each object here carries only the attributes KvtConnector reads, named as vLLM names them.

Run as a script it is a prefill instance in its own process: `python vllm_fake.py CONFIG_JSON`, printing the
decode instance's kv_transfer_params as one JSON line per request, then "sent <id>" as each send finishes.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch


@dataclass
class KVTransferConfig:
    kv_role: str
    kv_connector_extra_config: Dict[str, Any]
    kv_connector: str = "KvtConnector"


@dataclass
class CacheConfig:
    block_size: int


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    rank: int = 0  # vLLM's global rank; with tensor parallelism alone, the TP rank


class ModelConfig:
    def __init__(self, total_kv_heads: int) -> None:
        self._heads = total_kv_heads

    def get_total_num_kv_heads(self) -> int:
        return self._heads


@dataclass
class VllmConfig:
    kv_transfer_config: Optional[KVTransferConfig]
    cache_config: CacheConfig
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    model_config: Optional[ModelConfig] = None


class _Status:
    def __init__(self, name: str) -> None:
        self.name = name


@dataclass
class Request:
    request_id: str
    prompt_token_ids: List[int]
    kv_transfer_params: Optional[Dict[str, Any]]
    status: _Status = field(default_factory=lambda: _Status("WAITING"))


class Blocks:
    def __init__(self, ids: Sequence[int]) -> None:
        self._ids = list(ids)

    def get_block_ids(self) -> Tuple[List[int], ...]:
        return (list(self._ids),)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: List[int]
    block_ids: Tuple[List[int], ...]
    num_computed_tokens: int


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: List[NewRequestData] = field(default_factory=list)
    num_scheduled_tokens: Dict[str, int] = field(default_factory=dict)
    scheduled_cached_reqs: Any = None
    finished_req_ids: Set[str] = field(default_factory=set)


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[Set[str]] = None
    finished_recving: Optional[Set[str]] = None


class FakeEngine:
    """One vLLM instance: a scheduler-role connector and one worker-role connector per tensor-parallel rank, each
    rank with per-layer KV tensors [2, num_blocks, block_size, its heads, head_dim] (NHD, or HND strides; vLLM's
    sharding: heads / tp_size each, or one replicated head each when tp_size > heads), a free list of blocks. As vLLM's output aggregator does, a request counts as finished sending or
    receiving once every rank has reported it."""

    def __init__(self, role: str, extra: Dict[str, Any], layers: int = 3, blocks: int = 32, block_size: int = 16,
                 heads: int = 2, head_dim: int = 64, dtype: torch.dtype = torch.bfloat16, order: str = "NHD",
                 device: str = "cpu", tp_size: int = 1) -> None:
        from kvt.vllm import KvtConnector
        from kvt.vllm._api import KVConnectorRole
        assert heads % tp_size == 0 or tp_size % heads == 0, "vLLM shards heads evenly or replicates them"

        def config(rank: int) -> VllmConfig:
            return VllmConfig(KVTransferConfig(role, extra), CacheConfig(block_size), ParallelConfig(tp_size, rank),
                              ModelConfig(heads) if tp_size > 1 else None)

        self.block_size, self.heads, self.head_dim, self.device = block_size, heads, head_dim, device
        self.tp_size, self.rank_heads = tp_size, max(1, heads // tp_size)
        self.head_begin = [r * heads // tp_size if tp_size > heads else r * self.rank_heads for r in range(tp_size)]
        self.sched = KvtConnector(config(0), KVConnectorRole.SCHEDULER)
        self.workers = [KvtConnector(config(r), KVConnectorRole.WORKER) for r in range(tp_size)]
        self.worker = self.workers[0]
        self.names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
        h = self.rank_heads
        if order == "NHD":
            make = lambda: torch.zeros(2, blocks, block_size, h, head_dim, dtype=dtype, device=device)  # noqa: E731
        else:
            make = lambda: torch.zeros(2, blocks, h, block_size, head_dim, dtype=dtype,  # noqa: E731
                                       device=device).permute(0, 1, 3, 2, 4)
        self.kvs = [{name: make() for name in self.names} for _ in range(tp_size)]
        self.kv = self.kvs[0]
        for worker, kv in zip(self.workers, self.kvs):
            worker.register_kv_caches(kv)
        self._reports: Dict[Tuple[str, str], Set[int]] = {}  # (kind, request id) -> ranks that reported it
        self.free = list(range(blocks))
        self.sending: Set[str] = set()
        self.received: Set[str] = set()

    def allocate(self, tokens: int) -> List[int]:
        n = -(-tokens // self.block_size)
        ids, self.free = self.free[:n][::-1], self.free[n:]  # not in order: the connector must follow the ids
        return ids

    def gather(self, ids: Sequence[int], tokens: int) -> np.ndarray:
        """[L, 2, T, H, D] float32 of the request's blocks: every head once, from the lowest rank holding it."""
        index = torch.tensor(list(ids), dtype=torch.long, device=self.device)
        h = self.rank_heads
        ranks = [r for r in range(self.tp_size) if r == 0 or self.head_begin[r] != self.head_begin[r - 1]]
        out = [torch.stack([torch.cat([self.kvs[r][name][kind][index].reshape(-1, h, self.head_dim)[:tokens]
                                       for r in ranks], dim=1) for kind in (0, 1)])
               for name in self.names]
        return torch.stack(out).float().cpu().numpy()

    def gather_rank(self, rank: int, ids: Sequence[int], tokens: int) -> np.ndarray:
        """[L, 2, T, its heads, D] float32 of the request's blocks on one rank."""
        index = torch.tensor(list(ids), dtype=torch.long, device=self.device)
        return torch.stack([torch.stack([self.kvs[rank][name][kind][index].reshape(-1, self.rank_heads,
                                                                                   self.head_dim)[:tokens]
                                         for kind in (0, 1)]) for name in self.names]).float().cpu().numpy()

    def step(self, output: SchedulerOutput, compute: Optional[Dict[str, Tuple[List[int], np.ndarray]]] = None) -> None:
        """One engine step: the scheduler's metadata to the worker, the forward pass (writing `compute`'s KV
        layer by layer, as attention does), then the connector's report back to the scheduler."""
        meta = self.sched.build_connector_meta(output)
        h = self.rank_heads
        finished: Dict[str, Set[str]] = {"sending": set(), "recving": set()}
        for rank, (worker, kv) in enumerate(zip(self.workers, self.kvs)):
            worker.bind_connector_metadata(meta)
            worker.start_load_kv(None)
            for layer, name in enumerate(self.names):
                worker.wait_for_layer_load(name)
                for ids, values in (compute or {}).values():
                    index = torch.tensor(ids, dtype=torch.long, device=self.device)
                    for kind in (0, 1):
                        padded = torch.zeros(len(ids) * self.block_size, h, self.head_dim, device=self.device)
                        begin = self.head_begin[rank]
                        padded[: values.shape[2]] = torch.from_numpy(
                            values[layer, kind, :, begin:begin + h]).to(self.device)
                        kv[name][kind][index] = padded.reshape(len(ids), self.block_size, h,
                                                               self.head_dim).to(kv[name].dtype)
                worker.save_kv_layer(name, kv[name], None)
            worker.wait_for_save()
            sending, recving = worker.get_finished(output.finished_req_ids)
            worker.clear_connector_metadata()
            for kind, ids in (("sending", sending), ("recving", recving)):
                for rid in ids or ():
                    ranks = self._reports.setdefault((kind, rid), set())
                    assert rank not in ranks, f"rank {rank} reported {rid} {kind} twice"
                    ranks.add(rank)
                    if len(ranks) == self.tp_size:
                        del self._reports[(kind, rid)]
                        finished[kind].add(rid)
        sending, recving = finished["sending"] or None, finished["recving"] or None
        self.sending |= sending or set()
        self.received |= recving or set()
        self.sched.update_connector_output(KVConnectorOutput(sending, recving))

    def prefill(self, request_id: str, values: np.ndarray, params: Dict[str, Any]) -> Tuple[Request, List[int], Any]:
        """Runs a whole prompt (its KV is `values` [L, 2, T, H, D]) in one step and finishes the request
        (max_tokens 1, as a P/D proxy asks). Returns the request, its blocks and request_finished's answer."""
        tokens = values.shape[2]
        request = Request(request_id, list(range(tokens)), dict(params))
        matched, _ = self.sched.get_num_new_matched_tokens(request, 0)
        assert matched == 0
        ids = self.allocate(tokens)
        self.sched.update_state_after_alloc(request, Blocks(ids), 0)
        self.step(SchedulerOutput([NewRequestData(request_id, request.prompt_token_ids, (ids,), 0)],
                                  {request_id: tokens}), compute={request_id: (ids, values)})
        request.status = _Status("FINISHED_LENGTH_CAPPED")
        return request, ids, self.sched.request_finished(request, ids)

    def start_decode(self, request_id: str, tokens: int, params: Dict[str, Any]) -> Tuple[Request, List[int]]:
        request = Request(request_id, list(range(tokens)), dict(params))
        matched, is_async = self.sched.get_num_new_matched_tokens(request, 0)
        assert (matched, is_async) == (tokens, True), (matched, is_async)
        ids = self.allocate(tokens)
        self.sched.update_state_after_alloc(request, Blocks(ids), matched)
        return request, ids

    def run_until(self, done: Any, timeout: float, finished: Set[str] = frozenset()) -> None:  # type: ignore[assignment]
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                raise TimeoutError("the connector did not report the transfer in time")
            self.step(SchedulerOutput(finished_req_ids=set(finished)))
            time.sleep(0.01)

    def load_errors(self) -> Set[int]:
        errors: Set[int] = set()
        for worker in self.workers:
            errors |= worker.get_block_ids_with_load_errors()
        return errors

    def shutdown(self) -> None:
        for worker in self.workers:
            worker.shutdown()


def _prefill_main(config: Dict[str, Any]) -> None:
    """A prefill instance in its own process: every request's KV from a seed; prints params, then sends."""
    engine = FakeEngine("kv_producer", config["extra"], **config.get("shape", {}))
    shape = config.get("shape", {})
    pending = []
    for req in config["requests"]:
        if "kv" in req:  # real KV [L, 2, T, H, D] (the reference engine's dump)
            values = np.load(req["kv"]).astype(np.float32)[:, :, :req["tokens"]]
        else:
            rng = np.random.default_rng(req["seed"])
            values = rng.standard_normal((len(engine.names), 2, req["tokens"], shape.get("heads", 2),
                                          shape.get("head_dim", 64))).astype(np.float32)
        np.save(req["out"], values)
        params = {"do_remote_decode": True, "kvt_decode_daemon": config["decode_daemon"]}
        if "decode_tp_size" in config:
            params["kvt_decode_tp_size"] = config["decode_tp_size"]
        request, ids, (delay, params) = engine.prefill(req["id"], values, params)
        print(json.dumps({"id": req["id"], "delay": delay, "params": params}), flush=True)
        pending.append(req["id"])
    for rid in pending:
        engine.run_until(lambda: rid in engine.sending, timeout=config.get("timeout", 60),
                         finished=set(pending))
        print(f"sent {rid}", flush=True)
    engine.shutdown()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)  # as vLLM does: the connector's errors reach stderr
    _prefill_main(json.loads(sys.argv[1]))
