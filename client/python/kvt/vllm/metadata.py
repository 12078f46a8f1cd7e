"""What the scheduler-side connector tells the worker-side connectors each engine step."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Tuple

from kvt.vllm._api import KVConnectorMetadata


@dataclass(frozen=True)
class LoadSpec:
    """Decode side: receive transfer `transfer_id` into these blocks (vLLM's ids, token order)."""
    request_id: str  # vLLM's request id on this instance
    transfer_id: str  # the rendezvous key both instances' kvtd use (one kvt request per rank pair and layer, tp.py)
    block_ids: Tuple[int, ...]
    num_tokens: int
    source_daemon: str = ""  # the prefill kvtd's --daemon_id, "" for any authenticated one
    prefill_tp_size: int = 0  # the prefill instance's tensor-parallel size; 0: this instance's (tp.py)


@dataclass(frozen=True)
class SaveSpec:
    """Prefill side: the request's prompt KV is complete in this step; offer each layer as it is computed."""
    request_id: str
    transfer_id: str
    block_ids: Tuple[int, ...]
    num_tokens: int
    decode_daemon: str  # the decode kvtd: its peer service's "host:port", or its daemon id when kvtd uses etcd
    decode_tp_size: int = 0  # the decode instance's tensor-parallel size; 0: this instance's (tp.py)


@dataclass
class KvtConnectorMetadata(KVConnectorMetadata):
    loads: List[LoadSpec] = field(default_factory=list)
    saves: List[SaveSpec] = field(default_factory=list)
    # (request id, transfer id) of requests aborted mid-transfer: cancelled in both kvtd, then reported as
    # finished sending so that vLLM frees their blocks only once no daemon writes or reads them.
    cancels: List[Tuple[str, str]] = field(default_factory=list)
