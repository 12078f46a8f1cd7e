"""kvt's exceptions: one class per canonical gRPC status code, each carrying the code and the daemon's message.

Every failed call of kvt.Client raises a KvtError subclass chosen by the status code the daemon (or gRPC)
returned, so callers can catch what they handle:

    try:
        client.register_region("kv", layout, shm_name=name, size_bytes=n)
    except kvt.AlreadyExists:
        ...                       # registered before
    except kvt.KvtError as e:
        log.error("kvtd said %s: %s", e.code.name, e.message)

Arguments kvt rejects itself, before any call, raise InvalidArgument too (it is also a ValueError).
"""
from __future__ import annotations

from typing import Any, ClassVar, Dict, Tuple, Type

import grpc


class KvtError(Exception):
    """A failed kvt call: `code` is the canonical gRPC status code, `message` says what was wrong."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(code, message)
        self.code: grpc.StatusCode = code
        self.message: str = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def __reduce__(self) -> Tuple[Any, ...]:
        return (error_from_code, (self.code, self.message))


class _CodedError(KvtError):
    """A KvtError whose class fixes the code; constructed from the message alone."""

    status_code: ClassVar[grpc.StatusCode]

    def __init__(self, message: str) -> None:
        super().__init__(self.status_code, message)


class Cancelled(_CodedError):
    """The request or call was cancelled."""

    status_code = grpc.StatusCode.CANCELLED


class Unknown(_CodedError):
    """An error without a more specific code."""

    status_code = grpc.StatusCode.UNKNOWN


class InvalidArgument(_CodedError, ValueError):
    """A malformed request: bad id, layout, block list, scheme, size... Also a ValueError."""

    status_code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(_CodedError):
    """A call's or a transfer's deadline passed first."""

    status_code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(_CodedError):
    """An unknown region, request or shared-memory segment."""

    status_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(_CodedError):
    """A duplicate region or request id."""

    status_code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(_CodedError):
    """The caller may not do this."""

    status_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(_CodedError):
    """A limit was reached (live requests, memory)."""

    status_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(_CodedError):
    """The call does not fit the current state (wrong role, region in use, no GPU)."""

    status_code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(_CodedError):
    """The operation was aborted."""

    status_code = grpc.StatusCode.ABORTED


class OutOfRange(_CodedError):
    """A value past its valid range."""

    status_code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(_CodedError):
    """The daemon does not implement this."""

    status_code = grpc.StatusCode.UNIMPLEMENTED


class Internal(_CodedError):
    """An invariant broke inside the daemon."""

    status_code = grpc.StatusCode.INTERNAL


class Unavailable(_CodedError):
    """No daemon answers on the socket, or the peer daemon is gone."""

    status_code = grpc.StatusCode.UNAVAILABLE


class DataLoss(_CodedError):
    """Data was lost or corrupted."""

    status_code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(_CodedError):
    """The caller is not authenticated."""

    status_code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[_CodedError]] = {
    cls.status_code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists, PermissionDenied,
                ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal, Unavailable,
                DataLoss, Unauthenticated)
}
_BY_NUMBER: Dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


def status_code_from_int(number: int) -> grpc.StatusCode:
    """The grpc.StatusCode of a google.rpc.Code number (as in TransferEvent.status_code); UNKNOWN if none."""
    return _BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def error_from_code(code: grpc.StatusCode, message: str) -> KvtError:
    """The KvtError subclass instance for `code` (a plain KvtError for a code without one, e.g. OK)."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else KvtError(code, message)


def error_from_rpc(error: grpc.RpcError, call: str) -> KvtError:
    """The KvtError for a failed gRPC call, its message prefixed with the call's name ("Offer: ...")."""
    if isinstance(error, grpc.Call):
        code, details = error.code(), error.details() or ""
    else:
        code, details = grpc.StatusCode.UNKNOWN, str(error)
    return error_from_code(code, f"{call}: {details}")
