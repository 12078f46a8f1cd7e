"""KvtConnectorConfig: the connector's settings, read and checked from vLLM's `kv_transfer_config`.

    {"kv_connector": "KvtConnector", "kv_connector_module_path": "kvt.vllm", "kv_role": "kv_producer",
     "kv_connector_extra_config": {"kvtd_socket": "/run/kvtd.sock", "scheme": "lynx", "mode": "full"}}

Every problem is a ValueError naming the field and what would be accepted, raised when vLLM builds the connector
(at start-up), never in the middle of a request.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

MODES = ("full", "anchor")
ROLES = ("kv_producer", "kv_consumer", "kv_both")
_KNOWN_KEYS = {"kvtd_socket", "scheme", "mode", "deadline_s", "connect_timeout_s", "daemon_id"}


@dataclass(frozen=True)
class KvtConnectorConfig:
    kvtd_socket: str  # the unix socket of the kvtd beside this instance (kvtd --socket)
    role: str  # vLLM's kv_role: kv_producer (prefill), kv_consumer (decode) or kv_both
    scheme: str = "lynx"  # the codec the prefill side sends in (docs/CODEC.md names); checked by kvtd
    mode: str = "full"  # decode: hand a request back at FULL_READY of every layer, or at ANCHOR_READY ("anchor")
    deadline_s: float = 60.0  # bounds each transfer, from its first Offer / Expect
    connect_timeout_s: float = 5.0
    daemon_id: str = ""  # this instance's kvtd --daemon_id: the prefill side names it as the decode side's source

    @property
    def is_producer(self) -> bool:
        return self.role in ("kv_producer", "kv_both")

    @property
    def is_consumer(self) -> bool:
        return self.role in ("kv_consumer", "kv_both")

    @classmethod
    def from_kv_transfer_config(cls, kv_transfer_config: Any) -> "KvtConnectorConfig":
        """Reads vLLM's KVTransferConfig (or anything with its attributes: kv_role, kv_connector_extra_config)."""
        if kv_transfer_config is None:
            raise ValueError("KvtConnector needs vLLM's --kv-transfer-config")
        role = getattr(kv_transfer_config, "kv_role", None)
        if role not in ROLES:
            raise ValueError(f"kv_transfer_config.kv_role must be one of {', '.join(ROLES)} for KvtConnector, "
                             f"got {role!r}")
        extra = getattr(kv_transfer_config, "kv_connector_extra_config", None) or {}
        return cls.from_extra_config(role, extra)

    @classmethod
    def from_extra_config(cls, role: str, extra: Mapping[str, Any]) -> "KvtConnectorConfig":
        if not isinstance(extra, Mapping):
            raise ValueError(f"kv_connector_extra_config must be a JSON object, got {type(extra).__name__}")
        unknown = sorted(set(extra) - _KNOWN_KEYS)
        if unknown:
            raise ValueError(f"kv_connector_extra_config: unknown key(s) {', '.join(unknown)} for KvtConnector "
                             f"(known: {', '.join(sorted(_KNOWN_KEYS))})")
        socket = extra.get("kvtd_socket")
        if not isinstance(socket, str) or not socket:
            raise ValueError("kv_connector_extra_config.kvtd_socket is required: the unix socket of the kvtd "
                             "beside this vLLM instance (kvtd --socket)")
        scheme = extra.get("scheme", "lynx")
        if not isinstance(scheme, str) or not scheme:
            raise ValueError(f"kv_connector_extra_config.scheme must be a codec name such as \"lynx\", \"int8\" "
                             f"or \"bf16\", got {scheme!r}")
        mode = extra.get("mode", "full")
        if mode not in MODES:
            raise ValueError(f"kv_connector_extra_config.mode must be \"full\" or \"anchor\", got {mode!r}")
        daemon_id = extra.get("daemon_id", "")
        if not isinstance(daemon_id, str):
            raise ValueError(f"kv_connector_extra_config.daemon_id must be a string, got {daemon_id!r}")
        return cls(kvtd_socket=socket, role=role, scheme=scheme, mode=mode,
                   deadline_s=_seconds(extra, "deadline_s", 60.0),
                   connect_timeout_s=_seconds(extra, "connect_timeout_s", 5.0), daemon_id=daemon_id)


def _seconds(extra: Mapping[str, Any], key: str, default: float) -> float:
    value = extra.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"kv_connector_extra_config.{key} must be a positive number of seconds, got {value!r}")
    return float(value)
