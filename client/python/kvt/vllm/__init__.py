"""kvt for vLLM: `KvtConnector`, a KV connector (vLLM's `KVConnectorBase_V1`) over the kvtd beside each instance.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvtConnector", "kv_connector_module_path": "kvt.vllm",
        "kv_role": "kv_producer", "kv_connector_extra_config": {"kvtd_socket": "/run/kvtd.sock"}}'

The prefill instance (kv_producer) offers each layer's KV to its kvtd as the layer is computed; the decode instance
(kv_consumer) expects it into the blocks vLLM allocated and hands the request back to vLLM's scheduler when it has
landed (mode "full": every layer at full precision; mode "anchor": every layer's anchor, the residual landing in
place afterwards). docs/VLLM.md has the set-up, the request parameters a proxy passes, and what is approximate.
"""
from kvt.vllm.config import KvtConnectorConfig
from kvt.vllm.connector import KvtConnector
from kvt.vllm.metadata import KvtConnectorMetadata, LoadSpec, SaveSpec

__all__ = ["KvtConnector", "KvtConnectorConfig", "KvtConnectorMetadata", "LoadSpec", "SaveSpec"]
