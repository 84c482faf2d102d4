"""The one translation point between gRPC status codes and the exception tree, both ways."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from elasticps import errors
from elasticps.master.client import MASTER_RETRY
from elasticps.pserver.client import PSERVER_RETRY
from elasticps.rpc.channel import RETRY_UNAVAILABLE
from elasticps.rpc.error_codes import ERROR_METADATA_KEY, raise_for_rpc_error, status_for


class FailedCall(grpc.RpcError, grpc.Call):
    """What a stub raises: an RpcError that is also a Call with a code and details."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> Any:
        return ()

    def trailing_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False


DOMAIN = [
    (errors.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFoundError, grpc.StatusCode.NOT_FOUND),
    (errors.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


@pytest.mark.parametrize(("cls", "code"), DOMAIN)
def test_domain_errors_are_not_rpc_errors_and_round_trip_through_their_status(
        cls: type[errors.ElasticPSError], code: grpc.StatusCode) -> None:
    assert not issubclass(cls, errors.RPCError)
    assert issubclass(cls, errors.ElasticPSError)
    raised = cls("task 7 does not exist")
    assert status_for(raised) is code
    with pytest.raises(cls, match="task 7 does not exist") as info:
        raise_for_rpc_error(FailedCall(code, "task 7 does not exist"), what="master GetTask")
    assert not isinstance(info.value, errors.RPCError)
    assert isinstance(info.value.__cause__, grpc.RpcError)


@pytest.mark.parametrize(("code", "cls"), [
    (grpc.StatusCode.UNAVAILABLE, errors.UnavailableError),
    (grpc.StatusCode.DEADLINE_EXCEEDED, errors.UnavailableError),
    (grpc.StatusCode.UNAUTHENTICATED, errors.UnauthenticatedError),
    (grpc.StatusCode.INTERNAL, errors.RemoteError),
])
def test_transport_failures_become_rpc_errors_carrying_the_status_name(
        code: grpc.StatusCode, cls: type[errors.RPCError]) -> None:
    with pytest.raises(cls) as info:
        raise_for_rpc_error(FailedCall(code, "boom"), what="pserver shard 0 Push")
    assert info.value.code == code.name
    assert f"pserver shard 0 Push failed with {code.name}: boom" in str(info.value)


def test_resource_exhausted_by_the_call_limit_is_retried_but_by_a_message_size_is_not() -> None:
    # The two texts gRPC sends (grpc/_server.py; core's message size filter).
    with pytest.raises(errors.OverloadedError) as full:
        raise_for_rpc_error(FailedCall(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                       "Concurrent RPC limit exceeded!"))
    assert RETRY_UNAVAILABLE.is_retryable(full.value)
    assert MASTER_RETRY.is_retryable(full.value)
    assert PSERVER_RETRY.is_retryable(full.value)
    for details in ("Received message larger than max (300 vs. 200)",
                    "Sent message larger than max (300 vs. 200)"):
        with pytest.raises(errors.RemoteError) as too_large:
            raise_for_rpc_error(FailedCall(grpc.StatusCode.RESOURCE_EXHAUSTED, details))
        assert not PSERVER_RETRY.is_retryable(too_large.value)
        assert not MASTER_RETRY.is_retryable(too_large.value)


def test_out_of_range_maps_onto_the_nearest_domain_error() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        raise_for_rpc_error(FailedCall(grpc.StatusCode.OUT_OF_RANGE, "x"))


def test_a_call_cancelled_by_a_stopping_server_is_worth_a_retry() -> None:
    with pytest.raises(errors.UnavailableError):
        raise_for_rpc_error(FailedCall(grpc.StatusCode.CANCELLED, "CANCELLED"))


def test_aborted_is_a_changed_pserver_layout_both_ways() -> None:
    with pytest.raises(errors.LayoutChangedError):
        raise_for_rpc_error(FailedCall(grpc.StatusCode.ABORTED, "x"))
    assert status_for(errors.LayoutChangedError("2 shards now")) is grpc.StatusCode.ABORTED


def test_servers_answer_store_and_leadership_problems_as_unavailable() -> None:
    assert status_for(errors.NotLeaderError("deposed")) is grpc.StatusCode.UNAVAILABLE
    assert status_for(errors.StoreUnavailableError("down")) is grpc.StatusCode.UNAVAILABLE
    assert status_for(errors.ConfigError("bad")) is grpc.StatusCode.INVALID_ARGUMENT
    assert status_for(RuntimeError("bug")) is grpc.StatusCode.INTERNAL


@pytest.mark.parametrize(("details", "cls"), [
    ("Concurrent RPC limit exceeded!", errors.OverloadedError),  # gRPC's call limit: retried
    ("Received message larger than max (300 vs. 100)", errors.RemoteError),  # never better
    ("table 'emb' would hold 9 rows over its cap of 8", errors.ResourceExhaustedError),
])
def test_resource_exhausted_is_told_apart_by_who_sent_it(
        details: str, cls: type[errors.ElasticPSError]) -> None:
    with pytest.raises(cls) as info:
        raise_for_rpc_error(FailedCall(grpc.StatusCode.RESOURCE_EXHAUSTED, details), what="push")
    assert type(info.value) is cls
    assert isinstance(info.value, errors.RPCError) is (cls is not errors.ResourceExhaustedError)


class MarkedCall(FailedCall):
    """A failure an elasticps servicer answered: it carries the x-elasticps-error marker."""

    def __init__(self, code: grpc.StatusCode, details: str, error: str) -> None:
        super().__init__(code, details)
        self._error = error

    def trailing_metadata(self) -> Any:
        return ((ERROR_METADATA_KEY, self._error),)


@pytest.mark.parametrize("details", ["Concurrent RPC limit exceeded!",
                                     "Received message larger than max (300 vs. 100)"])
def test_a_marked_resource_exhausted_is_the_domain_error_whatever_its_text(details: str) -> None:
    with pytest.raises(errors.ResourceExhaustedError) as info:
        raise_for_rpc_error(MarkedCall(grpc.StatusCode.RESOURCE_EXHAUSTED, details,
                                       "ResourceExhaustedError"), what="push")
    assert type(info.value) is errors.ResourceExhaustedError


@pytest.mark.parametrize(("code", "error", "cls"), [
    (grpc.StatusCode.UNAVAILABLE, "NotLeaderError", errors.UnavailableError),  # find the leader
    (grpc.StatusCode.INVALID_ARGUMENT, "ConfigError", errors.InvalidArgumentError),
    (grpc.StatusCode.ABORTED, "LayoutChangedError", errors.LayoutChangedError),
])
def test_a_marked_status_maps_by_its_code(code: grpc.StatusCode, error: str,
                                          cls: type[errors.ElasticPSError]) -> None:
    with pytest.raises(cls) as info:
        raise_for_rpc_error(MarkedCall(code, "x", error))
    assert type(info.value) is cls
