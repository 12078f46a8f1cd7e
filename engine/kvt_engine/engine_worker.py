"""What the prefill and decode workers share: the model on a device, and a paged KV cache that is a kvt region
registered with the kvtd beside the worker (shared memory on the CPU, a CUDA tensor through CUDA IPC on a GPU).
Each worker is one process with one thread driving it (worker_rpc)."""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import torch

from kvt_engine.gguf_loader import read_gguf
from kvt_engine.model import Llama
from kvt_engine.paged_cache import BlockAllocator, PagedKvCache

log = logging.getLogger("kvt_engine")

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """A worker's set-up. Picklable (it crosses to the spawned process)."""

    model_path: str
    socket: str  # the client socket of the kvtd beside this worker
    device: str = "cpu"  # "cpu" or "cuda:N"
    compute_dtype: str = "float32"  # a DTYPES key
    region_id: str = "kv"
    num_blocks: int = 1024
    block_tokens: int = 16
    max_positions: int = 8192
    threads: int = 0  # torch intra-op threads; 0 = every core


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class EngineWorker:
    def __init__(self, opts: WorkerOptions) -> None:
        import kvt

        self.opts = opts
        if opts.threads:
            torch.set_num_threads(opts.threads)
        self.device = torch.device(opts.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        t0 = time.monotonic()
        gm = read_gguf(opts.model_path)
        self.cfg = gm.config
        self.model = Llama(gm.config, gm.weights, device=self.device, dtype=DTYPES[opts.compute_dtype],
                           max_positions=opts.max_positions)
        del gm
        layout = kvt.KvLayout(num_layers=self.cfg.num_layers, num_blocks=opts.num_blocks,
                              block_tokens=opts.block_tokens, num_kv_heads=self.cfg.num_kv_heads,
                              head_dim=self.cfg.head_dim, dtype="bf16", order="NHD")
        self.kv = kvt.KvCache.allocate(layout, device=opts.device)
        self.client = kvt.Client(opts.socket)
        self.kv.register(self.client, opts.region_id)
        self.cache = PagedKvCache.from_kvt(self.kv)
        self.blocks = BlockAllocator(opts.num_blocks)
        log.info("%s ready in %.1f s: %s on %s, %d blocks of %d tokens (%.0f MiB region)", type(self).__name__,
                 time.monotonic() - t0, opts.compute_dtype, opts.device, opts.num_blocks, opts.block_tokens,
                 layout.size_bytes / 2**20)

    def cancel_quietly(self, request_id: str) -> None:
        """Ends `request_id` on both daemons after a failure here, so the other side stops waiting; a request that
        already finished, or a daemon that is gone, is logged and otherwise ignored."""
        try:
            self.client.cancel(request_id)
        except Exception as e:  # noqa: BLE001 - already finished, or the daemon is gone
            log.warning("cancel %s: %s", request_id, e)

    def info(self) -> dict[str, Any]:
        return {"pid": __import__("os").getpid(), "device": str(self.device), "dtype": self.opts.compute_dtype}

    def close(self) -> None:
        try:
            self.kv.close()
        finally:
            self.client.close()
