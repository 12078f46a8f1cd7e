"""KvtConnector: vLLM's KVConnectorBase_V1 over kvt (the scheduler half in scheduler.py, the worker half in
worker.py). vLLM builds one per process and role; each method below is vLLM's, delegating to its half."""
from __future__ import annotations

from typing import Any, Dict, Optional, Set, Tuple

from kvt.vllm._api import KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole
from kvt.vllm.config import KvtConnectorConfig
from kvt.vllm.metadata import KvtConnectorMetadata
from kvt.vllm.scheduler import KvtScheduler
from kvt.vllm.worker import KvtWorker, tensor_parallel_of


class KvtConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.config = KvtConnectorConfig.from_kv_transfer_config(vllm_config.kv_transfer_config)
        self._scheduler: Optional[KvtScheduler] = None
        self._worker: Optional[KvtWorker] = None
        tp = tensor_parallel_of(vllm_config)
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = KvtScheduler(self.config, int(vllm_config.cache_config.block_size), tp.size,
                                           tp.total_kv_heads)
        else:
            self._worker = KvtWorker(self.config, tp)

    # --- scheduler side --------------------------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[int, bool]:
        assert self._scheduler is not None
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self._scheduler is not None
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        assert self._scheduler is not None
        return self._scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: Any) -> None:
        assert self._scheduler is not None
        self._scheduler.update_connector_output(connector_output)

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        assert self._scheduler is not None
        return self._scheduler.request_finished(request, block_ids)

    def has_pending_push_work(self) -> bool:
        return self._scheduler is not None and self._scheduler.has_pending_work()

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        return None  # NHD and HND both map onto kvt layouts

    # --- worker side -----------------------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        assert self._worker is not None
        self._worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        assert self._worker is not None
        meta = self._get_connector_metadata()
        if not isinstance(meta, KvtConnectorMetadata):
            raise TypeError(f"KvtConnector got {type(meta).__name__} metadata")
        self._worker.start_load_kv(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None  # loads are asynchronous: a request runs only after get_finished reported it

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        assert self._worker is not None
        self._worker.save_kv_layer(layer_name, kv_layer)

    def wait_for_save(self) -> None:
        assert self._worker is not None
        self._worker.wait_for_save()

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        assert self._worker is not None
        return self._worker.get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        return self._worker.get_block_ids_with_load_errors() if self._worker is not None else set()

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()
