"""kvt.Client: what a Python inference engine uses to talk to the kvtd beside it (mirrors client/client.h).

gRPC is hidden: every method is a plain call bounded by a deadline that returns a value or raises a KvtError
subclass carrying the daemon's canonical status code and message. Thread-safe: one Client may be shared by the
engine's threads (the gRPC channel is), and watch() iterators may run concurrently.

    with kvt.Client("/tmp/kvtd-decode.sock") as client:
        client.register_region("kv", layout, shm_name=cache.shm_name, size_bytes=layout.size_bytes)
        client.expect("r1", "kv", block_ids=[0, 1, 2], num_tokens=40)
        client.wait_for_layer("r1", 0, stage="anchor", timeout=5.0)
"""
from __future__ import annotations

import enum
import logging
import math
import operator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, Type, TypeVar, Union

import grpc

from kvt.errors import (DeadlineExceeded, FailedPrecondition, InvalidArgument, KvtError, Unavailable,
                        error_from_code, error_from_rpc, status_code_from_int)
from kvt.layout import KvLayout

try:
    from kvt._proto import client_pb2, client_pb2_grpc, layout_pb2
except ImportError as _e:  # pragma: no cover - a source checkout without generated stubs
    raise ImportError(
        "kvt's gRPC stubs are missing (kvt/_proto): install the package (pip install client/python) or "
        "generate them in the checkout with `python3 client/python/build_stubs.py`") from _e

_LOG = logging.getLogger("kvt")
_T = TypeVar("_T")
_MAX_DEADLINE_MS = 2**32 - 1  # the proto's uint32; the daemon's own range is 1..3600000 ms


class Side(enum.IntEnum):
    """Which side of a request a call means, for a daemon that runs both roles."""

    UNSPECIFIED = 0  # the decode side if this daemon expects the request, else the prefill side
    PREFILL = 1
    DECODE = 2


class EventKind(enum.IntEnum):
    """What a TransferEvent reports."""

    UNSPECIFIED = 0
    ANCHOR_READY = 1  # the layer holds anchor-decoded values (coarse; usable for attention)
    FULL_READY = 2  # the layer holds full-precision values (prefill side: the decode daemon has all of it)
    DONE = 3  # every layer is FULL_READY (or anchor-only, when allowed and degraded)
    FAILED = 4  # the transfer failed; status_code and message say why


class Stage(str, enum.Enum):
    """The precision wait_for_layer waits for."""

    ANCHOR = "anchor"  # anchor or better: ANCHOR_READY or FULL_READY
    FULL = "full"  # FULL_READY


@dataclass(frozen=True)
class TransferEvent:
    """One event of a request, as Watch streams it."""

    kind: EventKind
    layer: int
    at_us: int  # microseconds since the request was first seen by this daemon
    status_code: int = 0  # for FAILED: a google.rpc.Code number
    message: str = ""  # for FAILED: why

    @property
    def terminal(self) -> bool:
        """DONE or FAILED: the last event of a request."""
        return self.kind in (EventKind.DONE, EventKind.FAILED)

    def error(self) -> Optional[KvtError]:
        """For FAILED, the KvtError of its status (e.g. kvt.Cancelled, kvt.DeadlineExceeded); else None."""
        if self.kind is not EventKind.FAILED:
            return None
        return error_from_code(status_code_from_int(self.status_code), self.message)

    @classmethod
    def from_proto(cls, message: Any) -> "TransferEvent":
        """From a kvt.v1.TransferEvent; an unknown kind (a newer daemon) reads as UNSPECIFIED."""
        try:
            kind = EventKind(message.kind)
        except ValueError:
            kind = EventKind.UNSPECIFIED
        return cls(kind=kind, layer=message.layer, at_us=message.at_us, status_code=message.status_code,
                   message=message.message)


@dataclass(frozen=True)
class RequestState:
    """An in-flight request as Stats lists it."""

    request_id: str
    side: Side
    scheme: str
    peer: str  # the other daemon
    num_layers: int
    layers_anchor_ready: int  # decode side: layers whose anchor is in the engine's blocks
    layers_full_ready: int  # decode side: at full precision; prefill side: layers delivered
    age_us: int


@dataclass(frozen=True)
class Stats:
    """A daemon's counters (kvt.v1.StatsResponse); `requests` only when asked for."""

    daemon_id: str
    transfers_started: int
    transfers_done: int
    transfers_failed: int
    transfers_cancelled: int
    anchor_bytes_sent: int  # chunk payload bytes on the anchor lane (stage 0)
    residual_bytes_sent: int
    bytes_received: int
    in_flight: int
    chunks_rejected: int  # data-plane chunks that failed their checks (all causes)
    regions: int
    requests: Tuple[RequestState, ...] = ()

    @classmethod
    def from_proto(cls, message: Any) -> "Stats":
        """From a kvt.v1.StatsResponse."""
        requests = tuple(
            RequestState(request_id=r.request_id, side=_side(r.side),
                         scheme=r.scheme, peer=r.peer, num_layers=r.num_layers,
                         layers_anchor_ready=r.layers_anchor_ready, layers_full_ready=r.layers_full_ready,
                         age_us=r.age_us)
            for r in message.requests)
        return cls(daemon_id=message.daemon_id, transfers_started=message.transfers_started,
                   transfers_done=message.transfers_done, transfers_failed=message.transfers_failed,
                   transfers_cancelled=message.transfers_cancelled, anchor_bytes_sent=message.anchor_bytes_sent,
                   residual_bytes_sent=message.residual_bytes_sent, bytes_received=message.bytes_received,
                   in_flight=message.in_flight, chunks_rejected=message.chunks_rejected, regions=message.regions,
                   requests=requests)


@dataclass(frozen=True)
class StageTime:
    """One pipeline stage of a request on one daemon (kvt.v1.StageTime); times in microseconds since the daemon
    first saw the request."""

    count: int  # runs: layers, chunks, decode calls ...
    busy_us: int  # their durations summed over threads (may exceed last_end_us - first_start_us)
    first_start_us: int
    last_end_us: int
    bytes: int


@dataclass(frozen=True)
class Profile:
    """Where a request's time went on one daemon, stage by stage (kvt.v1.ProfileResponse; docs/DAEMON.md, "Where
    the time goes"). Prefill stages: "encode", "staging_wait", "send"; decode stages: "rendezvous",
    "arrive_anchor", "arrive_residual", "decode_queue", "decode_anchor", "decode_full". Stages that never ran are
    absent."""

    request_id: str
    side: Side
    finished: bool  # DONE or FAILED; a running request's figures still grow
    stages: Dict[str, StageTime]

    @classmethod
    def from_proto(cls, message: Any) -> "Profile":
        """From a kvt.v1.ProfileResponse."""
        stages = {t.stage: StageTime(count=t.count, busy_us=t.busy_us, first_start_us=t.first_start_us,
                                     last_end_us=t.last_end_us, bytes=t.bytes) for t in message.stages}
        return cls(request_id=message.request_id, side=_side(message.side), finished=message.finished,
                   stages=stages)


class Client:
    """A connection to one kvtd's client socket. A context manager; close() releases the channel."""

    def __init__(self, socket: str, connect_timeout: float = 5.0, call_timeout: float = 30.0) -> None:
        """Connects to the kvtd serving `socket` (kvtd --client_socket).

        `connect_timeout` bounds the connection (seconds); `call_timeout` is the deadline of each unary call.
        Unavailable (saying which socket) if no daemon answers within connect_timeout.
        """
        self._socket = socket
        self._call_timeout = _positive_seconds("call_timeout", call_timeout)
        connect_timeout = _positive_seconds("connect_timeout", connect_timeout)
        self._channel = grpc.insecure_channel(f"unix:{socket}")
        self._stub = client_pb2_grpc.KvtClientStub(self._channel)
        self._closed = False
        # One Stats call that waits for the connection proves a kvtd answers. (grpc.channel_ready_future would
        # too, but its connectivity poller makes close() take 0.2 s.)
        try:
            self._stub.Stats(client_pb2.StatsRequest(), timeout=connect_timeout, wait_for_ready=True)
        except grpc.RpcError as e:
            self.close()
            code = e.code()  # type: ignore[attr-defined]
            if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                raise Unavailable(f"no kvtd answers on {socket} within {connect_timeout:g} s; start one (kvtd "
                                  f"--client_socket={socket}) or check the path and its permissions") from None
            raise error_from_rpc(e, "connecting") from e
        _LOG.debug("connected to kvtd on %s", socket)

    @property
    def socket(self) -> str:
        """The daemon's client socket."""
        return self._socket

    def close(self) -> None:
        """Closes the channel; calls after this raise FailedPrecondition. Idempotent."""
        if not self._closed:
            self._closed = True
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(socket={self._socket!r}{', closed' if self._closed else ''})"

    # --- regions ---------------------------------------------------------------------------------------------

    def register_region(self, region_id: str, layout: KvLayout, shm_name: str, size_bytes: int) -> None:
        """Registers a KV cache held in the POSIX shared-memory segment `shm_name` ("/name"), mapping its first
        `size_bytes` bytes. The daemon checks every later access against `layout`.

        InvalidArgument for a bad id, layout, name or a layout that does not fit in size_bytes; NotFound if no
        such segment exists; AlreadyExists if region_id is registered.
        """
        request = self._build("RegisterRegion", lambda: client_pb2.RegisterRegionRequest(
            region_id=region_id, layout=_layout_proto(layout),
            shm=client_pb2.ShmMemory(shm_name=shm_name, size_bytes=size_bytes)))
        self._unary("RegisterRegion", request)

    def register_gpu_region(self, region_id: str, layout: KvLayout, ipc_handle: bytes, size_bytes: int,
                            device: int, offset_bytes: int = 0) -> None:
        """Registers a KV cache in this process's GPU memory: `ipc_handle` is the 64-byte cudaIpcMemHandle_t of
        the allocation holding it, the region starts `offset_bytes` into that allocation and spans `size_bytes`,
        and `device` is the daemon's CUDA ordinal of the same GPU. KvCache.register does all this for a torch
        CUDA cache. The allocation must stay alive until the region is unregistered.

        FailedPrecondition if the daemon has no GPU; InvalidArgument for a malformed handle or layout.
        """
        request = self._build("RegisterRegion", lambda: client_pb2.RegisterRegionRequest(
            region_id=region_id, layout=_layout_proto(layout),
            cuda_ipc=client_pb2.CudaIpcMemory(ipc_handle=bytes(ipc_handle), size_bytes=size_bytes, device=device,
                                              offset_bytes=offset_bytes)))
        self._unary("RegisterRegion", request)

    def unregister_region(self, region_id: str) -> None:
        """Unmaps a region. FailedPrecondition while a transfer still uses it (cancel those first); NotFound for
        an unknown id."""
        request = self._build("UnregisterRegion", lambda: client_pb2.UnregisterRegionRequest(region_id=region_id))
        self._unary("UnregisterRegion", request)

    # --- transfers -------------------------------------------------------------------------------------------

    def offer(self, request_id: str, region_id: str, block_ids: Iterable[int], num_tokens: int,
              ready_layers: Iterable[int], scheme: str = "lynx", decode_daemon: str = "",
              deadline: float = 60.0) -> None:
        """Prefill side: the request's KV lives in `block_ids` (token order) of `region_id`; send it to the
        decode daemon `decode_daemon` in codec `scheme`: its peer service's "host:port", or its daemon id when the
        daemons register in etcd (kvtd --etcd_endpoints).

        Call again with more `ready_layers` (same request, blocks and daemon) as layers complete; each layer is
        sent once. `deadline` (seconds, from the first offer) bounds the whole transfer. InvalidArgument for a
        malformed request or unknown scheme; NotFound for an unknown region; FailedPrecondition if the daemon is
        not a prefill daemon; ResourceExhausted at its request limit.
        """
        request = self._build("Offer", lambda: client_pb2.OfferRequest(
            request_id=request_id, region_id=region_id, block_ids=_indices(block_ids), num_tokens=num_tokens,
            ready_layers=_indices(ready_layers), scheme=layout_pb2.SchemeSpec(name=scheme),
            decode_daemon=decode_daemon, deadline_ms=_deadline_ms(deadline)))
        self._unary("Offer", request)

    def expect(self, request_id: str, region_id: str, block_ids: Iterable[int], num_tokens: int,
               source_daemon: str = "", deadline: float = 60.0, allow_anchor_only: bool = False) -> None:
        """Decode side: write the request's KV into `block_ids` of `region_id` when it arrives.

        `source_daemon` is the prefill daemon's id (kvtd --daemon_id), "" for any authenticated one. With
        `allow_anchor_only`, a transfer whose every layer is at anchor precision when `deadline` (seconds)
        passes finishes DONE instead of failing. Errors as for offer().
        """
        request = self._build("Expect", lambda: client_pb2.ExpectRequest(
            request_id=request_id, region_id=region_id, block_ids=_indices(block_ids), num_tokens=num_tokens,
            source_daemon=source_daemon, deadline_ms=_deadline_ms(deadline),
            allow_anchor_only=bool(allow_anchor_only)))
        self._unary("Expect", request)

    def cancel(self, request_id: str) -> None:
        """Cancels a request on this daemon and its peer and frees its buffers; its watchers see FAILED with
        CANCELLED. Idempotent for a known id; NotFound for an unknown one."""
        request = self._build("Cancel", lambda: client_pb2.CancelRequest(request_id=request_id))
        self._unary("Cancel", request)

    def watch(self, request_id: str, timeout: float = 60.0, side: Side = Side.UNSPECIFIED) -> Iterator[TransferEvent]:
        """The request's events, replayed from its start, until DONE or FAILED (both yielded; the iterator then
        ends). A FAILED event does not raise: its .error() gives the KvtError.

        The call starts at the first next(). Raises DeadlineExceeded if `timeout` (seconds, for the whole
        stream) passes before the last event, NotFound for an unknown request, or the call's error. Leaving the
        loop early (break, or closing the iterator) cancels the stream.
        """
        timeout = _positive_seconds("timeout", timeout)
        return self._watch(request_id, timeout, side, f"request {request_id} did not finish within {timeout:g} s")

    def wait_for_layer(self, request_id: str, layer: int, stage: Union[Stage, str] = Stage.ANCHOR,
                       timeout: float = 10.0, side: Side = Side.UNSPECIFIED) -> TransferEvent:
        """Blocks until `layer` of the request is at `stage` precision in the engine's blocks and returns the
        event that said so. "anchor" is satisfied by ANCHOR_READY or FULL_READY (full precision is at least
        the anchor's; single-stream schemes such as bf16 send only FULL_READY), "full" by FULL_READY.

        Raises the transfer's error if it failed first (e.g. Cancelled), FailedPrecondition if it finished
        without the layer reaching that stage (anchor-only, or a layer past the last), DeadlineExceeded after
        `timeout` seconds, NotFound for an unknown request.
        """
        wanted = _stage(stage)
        timeout = _positive_seconds("timeout", timeout)
        kinds = (EventKind.FULL_READY,) if wanted is Stage.FULL else (EventKind.ANCHOR_READY, EventKind.FULL_READY)
        message = f"layer {layer} of request {request_id} not {wanted.value}-ready within {timeout:g} s"
        for event in self._watch(request_id, timeout, side, message):
            if event.kind in kinds and event.layer == layer:
                return event
            if event.kind is EventKind.FAILED:
                error = event.error()
                assert error is not None
                raise error
            if event.kind is EventKind.DONE:
                raise FailedPrecondition(f"request {request_id} finished without layer {layer} reaching "
                                         f"{wanted.value} precision")
        raise FailedPrecondition(f"the watch of request {request_id} ended without DONE or FAILED")

    def stats(self, include_requests: bool = False) -> Stats:
        """The daemon's counters, and its in-flight requests when `include_requests`."""
        request = client_pb2.StatsRequest(include_requests=bool(include_requests))
        return Stats.from_proto(self._unary("Stats", request))

    def profile(self, request_id: str, side: Side = Side.UNSPECIFIED) -> Profile:
        """The request's per-stage profile on this daemon (running or recently finished). NotFound for an unknown
        request; `side` picks one on a daemon that has both sides of it."""
        request = self._build("Profile", lambda: client_pb2.ProfileRequest(request_id=request_id, side=int(side)))
        return Profile.from_proto(self._unary("Profile", request))

    # --- internals -------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPrecondition(f"the client of {self._socket} is closed")

    @staticmethod
    def _build(call: str, make: Callable[[], _T]) -> _T:
        """`make()`, with protobuf's TypeError/ValueError for a bad field (a negative id, a str for an int)
        raised as InvalidArgument naming the call."""
        try:
            return make()
        except KvtError:
            raise
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"{call}: {e}") from e

    def _unary(self, call: str, request: Any) -> Any:
        self._check_open()
        try:
            return getattr(self._stub, call)(request, timeout=self._call_timeout)
        except grpc.RpcError as e:
            raise error_from_rpc(e, call) from e

    def _watch(self, request_id: str, timeout: float, side: Side, deadline_message: str) -> Iterator[TransferEvent]:
        self._check_open()
        request = self._build("Watch", lambda: client_pb2.WatchRequest(request_id=request_id, side=int(side)))
        return self._stream(request, timeout, deadline_message)

    def _stream(self, request: Any, timeout: float, deadline_message: str) -> Iterator[TransferEvent]:
        call = self._stub.Watch(request, timeout=timeout)
        try:
            for message in call:
                event = TransferEvent.from_proto(message)
                yield event
                if event.terminal:
                    return
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # type: ignore[attr-defined]
                raise DeadlineExceeded(deadline_message) from e
            raise error_from_rpc(e, "Watch") from e
        finally:
            call.cancel()


def _positive_seconds(name: str, seconds: float) -> float:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise InvalidArgument(f"{name} must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


def _deadline_ms(seconds: float) -> int:
    """Seconds as the proto's milliseconds; the daemon checks its own range (1..3600000)."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
        raise InvalidArgument(f"deadline must be a number of seconds, got {seconds!r}")
    ms = round(seconds * 1000)
    if not 0 <= ms <= _MAX_DEADLINE_MS:
        raise InvalidArgument(f"deadline must fit the request's milliseconds (0..{_MAX_DEADLINE_MS / 1000:.0f} s; the "
                              f"daemon accepts 0.001..3600 s), got {seconds!r}")
    return ms


def _indices(values: Iterable[int]) -> list:
    """Block ids or layers as ints: anything with __index__ (numpy integers too); TypeError for floats."""
    return [operator.index(v) for v in values]


def _layout_proto(layout: KvLayout) -> Any:
    if not isinstance(layout, KvLayout):
        raise InvalidArgument(f"layout must be a kvt.KvLayout, got {type(layout).__name__}")
    return layout.to_proto()


def _side(value: int) -> Side:
    try:
        return Side(value)
    except ValueError:  # a newer daemon's side
        return Side.UNSPECIFIED


def _stage(stage: Union[Stage, str]) -> Stage:
    try:
        return Stage(stage.lower() if isinstance(stage, str) else stage)
    except ValueError:
        raise InvalidArgument(f"stage must be \"anchor\" or \"full\", got {stage!r}") from None
