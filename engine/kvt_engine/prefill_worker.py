"""The prefill worker: runs a prompt through the model layer by layer, writing each layer's K and V into its
paged cache (a kvt region), and offers each layer to its kvtd as soon as the layer's KV is written, so the
transfer of layer l overlaps the compute of layers l+1... One request at a time; see worker_rpc for threads."""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Optional

import numpy as np

from kvt_engine.engine_worker import EngineWorker, synchronize

log = logging.getLogger("kvt_engine")


@dataclasses.dataclass(frozen=True)
class PrefillJob:
    request_id: str
    tokens: list[int]  # the KV of exactly these positions is sent (the prompt without its last token)
    scheme: str
    decode_daemon: str  # the decode kvtd's peer address
    deadline_s: float = 120.0
    dump_path: Optional[str] = None  # write the KV as float32 [L, 2, T, H, D] .npy after the transfer


@dataclasses.dataclass
class PrefillResult:
    started_at: float  # time.monotonic(); comparable across this host's processes
    offered_at: list[float]  # per layer: when its Offer returned
    computed_at: float  # the last layer done
    done_at: float  # the prefill kvtd's DONE (every layer acknowledged by the decode daemon)
    events: list[tuple[str, int, int]]  # prefill-side events (kind, layer, at_us)


class PrefillWorker(EngineWorker):
    def run(self, job: PrefillJob) -> PrefillResult:
        import kvt

        n = len(job.tokens)
        table = self.blocks.take(self.cache.blocks_for(n))
        block_ids = table.tolist()
        offered: list[float] = []
        try:
            started = time.monotonic()

            def offer(layer: int) -> None:
                synchronize(self.device)  # the layer's KV must be in memory before kvtd reads it
                self.client.offer(job.request_id, self.opts.region_id, block_ids, n, ready_layers=[layer],
                                  scheme=job.scheme, decode_daemon=job.decode_daemon, deadline=job.deadline_s)
                offered.append(time.monotonic())

            self.model.prefill(job.tokens, self.cache, table, on_layer_kv=offer)
            computed = time.monotonic()
            events = []
            for ev in self.client.watch(job.request_id, timeout=job.deadline_s, side=kvt.Side.PREFILL):
                events.append((ev.kind.name, ev.layer, ev.at_us))
                if ev.kind == kvt.EventKind.FAILED:
                    raise RuntimeError(f"prefill side of {job.request_id} failed: {ev.message}")
            done = time.monotonic()
            if job.dump_path:
                np.save(job.dump_path, self.cache.dump_dense(table, n))
            return PrefillResult(started, offered, computed, done, events)
        except BaseException:
            if offered:  # the daemons know the request: end it on both sides, so the decode side stops waiting
                self.cancel_quietly(job.request_id)
            raise
        finally:
            self.blocks.give_back(table)
