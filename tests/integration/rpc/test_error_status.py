"""Errors cross a real gRPC server by status code and the ``x-elasticps-error`` marker.

A servicer's own elasticps error comes back as its class whatever its message says; only gRPC's
own RESOURCE_EXHAUSTED refusals (the concurrent-call limit, the message-size limit), which
carry no marker, are told apart by their text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from elasticps import errors
from elasticps.proto import common_pb2
from elasticps.rpc import bind, call, encode_tensor, make_channel, make_server, rpc_handler
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.error_codes import ERROR_METADATA_KEY, error_marker
from tests.helpers import wait_for

CREDS = JobCredentials("errors-test", "s3cret-token")  # insecure: the token, no TLS
SERVICE = "elasticps.test.Errors"
RECEIVE_LIMIT = 4096  # bytes the test server accepts in one request


class Raising:
    """Each method raises what the request's ``shape[0]`` picks from :data:`RAISED`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = threading.Event()

    @rpc_handler
    def raise_(self, request: common_pb2.Tensor, context: grpc.ServicerContext) -> Any:
        raise RAISED[request.shape[0]][0]

    @rpc_handler
    def hold(self, request: common_pb2.Tensor, context: grpc.ServicerContext) -> Any:
        self.running.set()
        self.release.wait(30)
        return request


# What a servicer raises, and the class its caller must get.
RAISED: list[tuple[errors.ElasticPSError, type[errors.ElasticPSError]]] = [
    # A servicer's cap whose message happens to read like gRPC's size limit: still the domain's.
    (errors.ResourceExhaustedError("a row larger than max_row_bytes=64 of table 'emb'"),
     errors.ResourceExhaustedError),
    (errors.ResourceExhaustedError("Concurrent RPC limit exceeded for table 'emb' (cap 8)"),
     errors.ResourceExhaustedError),
    (errors.ResourceExhaustedError("table 'emb' would hold 9 rows over its cap of 8"),
     errors.ResourceExhaustedError),
    (errors.InvalidArgumentError("Received message larger than max (9 vs. 8)"),
     errors.InvalidArgumentError),
    (errors.NotFoundError("task 7 does not exist"), errors.NotFoundError),
    (errors.FailedPreconditionError("no dataset yet"), errors.FailedPreconditionError),
    (errors.LayoutChangedError("2 shards now"), errors.LayoutChangedError),
    (errors.NotLeaderError("deposed"), errors.UnavailableError),
]


def _unary(fn: Callable[..., Any]) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=common_pb2.Tensor.FromString,
        response_serializer=lambda m: m.SerializeToString())


@pytest.fixture
def server() -> Iterator[tuple[str, Raising]]:
    servicer = Raising()
    # One call at a time, so a held call makes the next one meet gRPC's call limit.
    grpc_server = make_server(CREDS, max_workers=2, max_receive_bytes=RECEIVE_LIMIT,
                              max_concurrent_rpcs=1)
    grpc_server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        SERVICE, {"Raise": _unary(servicer.raise_), "Hold": _unary(servicer.hold)})])
    port = bind(grpc_server, "127.0.0.1", 0, CREDS)
    grpc_server.start()
    yield f"127.0.0.1:{port}", servicer
    servicer.release.set()
    grpc_server.stop(grace=None)


def _stub(channel: grpc.Channel, name: str) -> Any:
    return channel.unary_unary(f"/{SERVICE}/{name}",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=common_pb2.Tensor.FromString)


def _pick(index: int) -> common_pb2.Tensor:
    return common_pb2.Tensor(dtype=common_pb2.FLOAT32, shape=[index])


@pytest.mark.parametrize(("index", "expected"), [(i, cls) for i, (_, cls) in enumerate(RAISED)],
                         ids=[type(exc).__name__ + f"-{i}" for i, (exc, _) in enumerate(RAISED)])
def test_a_servicers_error_reaches_the_caller_as_its_class_whatever_its_text(
        server: tuple[str, Raising], index: int, expected: type[errors.ElasticPSError]) -> None:
    address, _ = server
    raised = RAISED[index][0]
    with make_channel(address, CREDS, "pserver") as channel:
        with pytest.raises(grpc.RpcError) as raw:
            _stub(channel, "Raise")(_pick(index), timeout=10)
        assert error_marker(raw.value) == type(raised).__name__
        with pytest.raises(expected) as info:
            call(_stub(channel, "Raise"), _pick(index), what="Raise")
    assert type(info.value) is expected
    assert str(raised) in str(info.value)


def test_grpcs_call_limit_is_an_overload_worth_a_retry(server: tuple[str, Raising]) -> None:
    address, servicer = server
    with make_channel(address, CREDS, "pserver") as channel:
        held = _stub(channel, "Hold").future(_pick(0), timeout=30)
        wait_for(servicer.running.is_set, 10, "the first call to run")
        with pytest.raises(grpc.RpcError) as raw:
            _stub(channel, "Raise")(_pick(0), timeout=10)
        assert raw.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_marker(raw.value) is None  # gRPC's own refusal: no marker
        with pytest.raises(errors.OverloadedError) as info:
            call(_stub(channel, "Raise"), _pick(0), what="Raise")
        assert info.value.code == "RESOURCE_EXHAUSTED"
        servicer.release.set()
        held.result(timeout=10)


def test_a_request_over_the_receive_limit_is_a_remote_error_not_retried(
        server: tuple[str, Raising]) -> None:
    address, _ = server
    too_big = encode_tensor(np.zeros(2 * RECEIVE_LIMIT, dtype=np.uint8))
    with make_channel(address, CREDS, "pserver") as channel:
        with pytest.raises(grpc.RpcError) as raw:
            _stub(channel, "Raise")(too_big, timeout=10)
        assert raw.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_marker(raw.value) is None
        with pytest.raises(errors.RemoteError) as info:
            call(_stub(channel, "Raise"), too_big, what="Raise")
    assert type(info.value) is errors.RemoteError
    assert "larger than max" in str(info.value)


def test_the_token_check_marks_its_refusal_too(server: tuple[str, Raising]) -> None:
    address, _ = server
    with grpc.insecure_channel(address) as bare:
        with pytest.raises(grpc.RpcError) as raw:
            _stub(bare, "Raise")(_pick(0), timeout=10)
        assert raw.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert (ERROR_METADATA_KEY, "UnauthenticatedError") in raw.value.trailing_metadata()
        with pytest.raises(errors.UnauthenticatedError):
            call(_stub(bare, "Raise"), _pick(0), what="Raise")
