"""The exception mapping: one KvtError subclass per canonical gRPC code, carrying the code and the message."""
from __future__ import annotations

import pickle

import grpc
import pytest

import kvt
from kvt.errors import error_from_rpc, status_code_from_int

CANONICAL = {
    grpc.StatusCode.CANCELLED: kvt.Cancelled,
    grpc.StatusCode.UNKNOWN: kvt.Unknown,
    grpc.StatusCode.INVALID_ARGUMENT: kvt.InvalidArgument,
    grpc.StatusCode.DEADLINE_EXCEEDED: kvt.DeadlineExceeded,
    grpc.StatusCode.NOT_FOUND: kvt.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: kvt.AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: kvt.PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: kvt.ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: kvt.FailedPrecondition,
    grpc.StatusCode.ABORTED: kvt.Aborted,
    grpc.StatusCode.OUT_OF_RANGE: kvt.OutOfRange,
    grpc.StatusCode.UNIMPLEMENTED: kvt.Unimplemented,
    grpc.StatusCode.INTERNAL: kvt.Internal,
    grpc.StatusCode.UNAVAILABLE: kvt.Unavailable,
    grpc.StatusCode.DATA_LOSS: kvt.DataLoss,
    grpc.StatusCode.UNAUTHENTICATED: kvt.Unauthenticated,
}


class FakeRpcError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """What a failed grpc call raises: an RpcError that is also a Call with code() and details()."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    # The rest of grpc.Call, unused here.
    def initial_metadata(self):  # type: ignore[no-untyped-def]
        return None

    def trailing_metadata(self):  # type: ignore[no-untyped-def]
        return None

    def is_active(self) -> bool:
        return False

    def time_remaining(self):  # type: ignore[no-untyped-def]
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback) -> bool:  # type: ignore[no-untyped-def]
        return False


@pytest.mark.parametrize("code,cls", list(CANONICAL.items()), ids=lambda x: getattr(x, "name", None) or x.__name__)
def test_each_canonical_code_has_its_exception(code: grpc.StatusCode, cls: type) -> None:
    error = kvt.error_from_code(code, "what was wrong")
    assert type(error) is cls and isinstance(error, kvt.KvtError)
    assert error.code is code and error.message == "what was wrong"
    assert str(error) == f"{code.name}: what was wrong"
    assert cls("m").code is code  # a subclass is built from the message alone


def test_rpc_errors_become_exceptions_naming_the_call() -> None:
    error = error_from_rpc(FakeRpcError(grpc.StatusCode.NOT_FOUND, "no region \"kv\""), "Offer")
    assert isinstance(error, kvt.NotFound)
    assert error.message == "Offer: no region \"kv\""


def test_an_rpc_error_without_a_status_is_unknown() -> None:
    error = error_from_rpc(grpc.RpcError("broken"), "Stats")
    assert isinstance(error, kvt.Unknown) and "broken" in error.message


def test_invalid_argument_is_also_a_value_error() -> None:
    with pytest.raises(ValueError):
        raise kvt.InvalidArgument("bad")
    assert not isinstance(kvt.NotFound("x"), ValueError)


def test_ok_has_no_subclass_but_still_carries_its_code() -> None:
    error = kvt.error_from_code(grpc.StatusCode.OK, "odd")
    assert type(error) is kvt.KvtError and error.code is grpc.StatusCode.OK


def test_event_status_numbers_map_to_codes() -> None:
    assert status_code_from_int(1) is grpc.StatusCode.CANCELLED
    assert status_code_from_int(14) is grpc.StatusCode.UNAVAILABLE
    assert status_code_from_int(99) is grpc.StatusCode.UNKNOWN


def test_failed_events_give_their_error() -> None:
    event = kvt.TransferEvent(kind=kvt.EventKind.FAILED, layer=0, at_us=5, status_code=4, message="late")
    error = event.error()
    assert isinstance(error, kvt.DeadlineExceeded) and error.message == "late"
    assert kvt.TransferEvent(kind=kvt.EventKind.DONE, layer=0, at_us=5).error() is None


def test_errors_survive_pickling() -> None:
    error = pickle.loads(pickle.dumps(kvt.AlreadyExists("dup")))
    assert type(error) is kvt.AlreadyExists and error.message == "dup"
    error = pickle.loads(pickle.dumps(kvt.KvtError(grpc.StatusCode.OK, "x")))
    assert type(error) is kvt.KvtError and error.code is grpc.StatusCode.OK
