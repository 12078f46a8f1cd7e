"""kvt: the Python client of kvtd, the sidecar that moves LLM KV caches from prefill to decode servers.

    import kvt
    layout = kvt.KvLayout(num_layers=32, num_blocks=256, block_tokens=16, num_kv_heads=8, head_dim=128)
    with kvt.Client("/tmp/kvtd-decode.sock") as client, kvt.KvCache.allocate(layout) as cache:
        cache.register(client, "kv")
        client.expect("r1", "kv", block_ids=range(8), num_tokens=128)
        client.wait_for_layer("r1", 0, stage="anchor", timeout=5.0)
        keys = cache.k(0)                     # torch view [blocks, tokens, heads, dim]

Errors are kvt.KvtError subclasses carrying the gRPC status code (kvt.NotFound, kvt.Unavailable, ...).
See docs/PYTHON.md.
"""
from kvt.client import Client, EventKind, Profile, RequestState, Side, Stage, StageTime, Stats, TransferEvent
from kvt.daemon import Daemon, DaemonAddresses, find_kvtd
from kvt.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, FailedPrecondition, Internal,
                        InvalidArgument, KvtError, NotFound, OutOfRange, PermissionDenied, ResourceExhausted,
                        Unauthenticated, Unavailable, Unimplemented, Unknown, error_from_code)
from kvt.kv_cache import KvCache, cuda_ipc_handle, release_cuda_ipc
from kvt.layout import BlockOrder, DType, KvLayout
from kvt.shm import ShmSegment

__version__ = "0.1.0"

__all__ = [
    "Aborted", "AlreadyExists", "BlockOrder", "Cancelled", "Client", "DType", "Daemon", "DaemonAddresses", "DataLoss",
    "DeadlineExceeded", "EventKind", "FailedPrecondition", "Internal", "InvalidArgument", "KvCache", "KvLayout",
    "KvtError", "NotFound", "OutOfRange", "PermissionDenied", "Profile", "RequestState", "ResourceExhausted",
    "ShmSegment", "Side", "Stage", "StageTime", "Stats", "TransferEvent", "Unauthenticated", "Unavailable",
    "Unimplemented", "Unknown", "cuda_ipc_handle", "error_from_code", "find_kvtd", "release_cuda_ipc",
]

# A library logs through "kvt" and leaves handlers to the application.
import logging as _logging

_logging.getLogger("kvt").addHandler(_logging.NullHandler())
