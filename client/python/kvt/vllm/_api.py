"""vLLM's connector API: the real classes when vLLM is installed, else stand-ins with the same names.

The stand-ins carry exactly what KvtConnector uses of vLLM's v1 connector base
(`vllm/distributed/kv_transfer/kv_connector/v1/base.py`): the role enum, the metadata base class and the
connector base with its metadata binding. They let the connector load, and its tests drive it in vLLM's call
order, on machines without vLLM (a CUDA build of vLLM and its torch are gigabytes; CI has neither).
"""
from __future__ import annotations

import abc
import enum
from typing import Any, Optional

try:  # pragma: no cover - exercised only where vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                                    KVConnectorRole)
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

    class KVConnectorRole(enum.Enum):  # type: ignore[no-redef]
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata(abc.ABC):  # type: ignore[no-redef]  # noqa: B024
        """Scheduler -> worker metadata of one engine step."""

    class KVConnectorBase_V1(abc.ABC):  # type: ignore[no-redef]  # noqa: N801
        """The subset of vLLM's KVConnectorBase_V1 that KvtConnector relies on."""

        def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
            if getattr(vllm_config, "kv_transfer_config", None) is None:
                raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
            self._connector_metadata: Optional[KVConnectorMetadata] = None
            self._vllm_config = vllm_config
            self._kv_transfer_config = vllm_config.kv_transfer_config
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self) -> KVConnectorRole:
            return self._role

        def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self) -> None:
            self._connector_metadata = None

        def has_connector_metadata(self) -> bool:
            return self._connector_metadata is not None

        def _get_connector_metadata(self) -> KVConnectorMetadata:
            assert self._connector_metadata is not None
            return self._connector_metadata

__all__ = ["HAVE_VLLM", "KVConnectorBase_V1", "KVConnectorMetadata", "KVConnectorRole"]
