"""RPC layer against a real gRPC server on loopback (mutual TLS with a test job's CA): codec
round trips, validation, auth, retry."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from elasticps.errors import (
    InvalidArgumentError,
    RemoteError,
    UnauthenticatedError,
    UnavailableError,
)
from elasticps.proto import common_pb2
from elasticps.rpc import (
    bind,
    call,
    decode_sparse,
    decode_tensor,
    encode_sparse,
    encode_tensor,
    make_channel,
    make_server,
    rpc_handler,
)
from elasticps.rpc.channel import RETRY_UNAVAILABLE
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.tls import peer_options
from tests.etcd_server import free_port
from tests.helpers import job_credentials

TOKEN = "s3cret-token"
JOB = "rpc-test"
SERVICE = "elasticps.test.Echo"
SERVER = job_credentials(JOB, "pserver", TOKEN)
CLIENT = job_credentials(JOB, "trainer", TOKEN)


def client_channel(address: str) -> grpc.Channel:
    return make_channel(address, CLIENT, "pserver")


def tls_channel_without_token(address: str) -> grpc.Channel:
    """A channel with the job's client certificate that adds no token."""
    assert CLIENT.tls is not None
    return grpc.secure_channel(address, CLIENT.tls.channel_credentials(),
                               options=peer_options(JOB, "pserver"))


class EchoServicer:
    """Echoes tensors back; ``Strict`` insists on float32 [*, 4] like a pserver would."""

    def __init__(self) -> None:
        self.calls = 0

    @rpc_handler
    def echo(self, request: common_pb2.Tensor, context: grpc.ServicerContext) -> common_pb2.Tensor:
        self.calls += 1
        return encode_tensor(decode_tensor(request))

    @rpc_handler
    def strict(
        self, request: common_pb2.Tensor, context: grpc.ServicerContext
    ) -> common_pb2.Tensor:
        array = decode_tensor(request, dtype=np.float32, shape=(None, 4), name="grad")
        self.calls += 1
        return encode_tensor(array * 2)

    @rpc_handler
    def sparse(
        self, request: common_pb2.SparseRows, context: grpc.ServicerContext
    ) -> common_pb2.SparseRows:
        ids, rows = decode_sparse(request, dim=3, name="push")
        self.calls += 1
        return encode_sparse(ids, rows)


def _add(server: grpc.Server, servicer: EchoServicer) -> None:
    def unary(fn: Callable[..., Any], req: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=req.FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )

    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Echo": unary(servicer.echo, common_pb2.Tensor),
                    "Strict": unary(servicer.strict, common_pb2.Tensor),
                    "Sparse": unary(servicer.sparse, common_pb2.SparseRows),
                },
            )
        ]
    )


def _stub(channel: grpc.Channel, name: str, resp: Any = common_pb2.Tensor) -> Any:
    return channel.unary_unary(
        f"/{SERVICE}/{name}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=resp.FromString,
    )


@pytest.fixture
def echo_server() -> Iterator[tuple[str, EchoServicer]]:
    servicer = EchoServicer()
    server = make_server(SERVER, max_workers=4)
    _add(server, servicer)
    port = bind(server, "127.0.0.1", 0, SERVER)
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(grace=None)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([1.5, -2.25], dtype=np.float64),
        np.array([[1, 2], [3, 4]], dtype=np.float16),
        np.array([-(2**62), 0, 2**62], dtype=np.int64),
        np.array([-7, 7], dtype=np.int32),
        np.array([1, 255], dtype=np.uint8),
        np.array([True, False, True]),
        np.zeros((0, 16), dtype=np.float32),  # empty
        np.zeros((), dtype=np.float32),  # scalar
        np.arange(3 * 1024 * 1024, dtype=np.float32).reshape(-1, 1024),  # 12 MiB > 4 MiB default
    ],
    ids=lambda a: f"{a.dtype}{list(a.shape)}",
)
def test_dense_round_trip(echo_server: tuple[str, EchoServicer], array: np.ndarray) -> None:
    address, _ = echo_server
    with client_channel(address) as channel:
        reply = call(_stub(channel, "Echo"), encode_tensor(array))
    back = decode_tensor(reply)
    assert back.dtype == array.dtype
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_big_endian_input_arrives_little_endian(echo_server: tuple[str, EchoServicer]) -> None:
    address, _ = echo_server
    array = np.arange(5, dtype=">f4")
    with client_channel(address) as channel:
        back = decode_tensor(call(_stub(channel, "Echo"), encode_tensor(array)))
    assert back.dtype == np.dtype("<f4")
    np.testing.assert_array_equal(back, array.astype("<f4"))


@pytest.mark.parametrize("n", [0, 1, 10_000])
def test_sparse_round_trip(echo_server: tuple[str, EchoServicer], n: int) -> None:
    address, _ = echo_server
    rng = np.random.default_rng(n)
    ids = rng.integers(0, 2**40, size=n, dtype=np.int64)
    rows = rng.standard_normal((n, 3)).astype(np.float32)
    with client_channel(address) as channel:
        reply = call(_stub(channel, "Sparse", common_pb2.SparseRows), encode_sparse(ids, rows))
    back_ids, back_rows = decode_sparse(reply)
    np.testing.assert_array_equal(back_ids, ids)
    np.testing.assert_array_equal(back_rows, rows)


@pytest.mark.parametrize(
    ("tensor", "fragment"),
    [
        (encode_tensor(np.zeros((2, 4), dtype=np.float64)), "dtype FLOAT64, expected FLOAT32"),
        (encode_tensor(np.zeros((2, 5), dtype=np.float32)), "shape (2, 5), expected (*, 4)"),
        (encode_tensor(np.zeros(8, dtype=np.float32)), "shape (8,), expected (*, 4)"),
        (common_pb2.Tensor(dtype=common_pb2.FLOAT32, shape=[2, 4], data=b"\0" * 31), "31 bytes"),
        (common_pb2.Tensor(shape=[1], data=b"\0" * 4), "unknown or unset dtype"),
        (common_pb2.Tensor(dtype=common_pb2.FLOAT32, shape=[-1, 4], data=b""), "negative"),
    ],
)
def test_bad_tensors_rejected_with_invalid_argument(
    echo_server: tuple[str, EchoServicer], tensor: common_pb2.Tensor, fragment: str
) -> None:
    address, servicer = echo_server
    with client_channel(address) as channel, pytest.raises(InvalidArgumentError) as info:
        call(_stub(channel, "Strict"), tensor)
    assert "INVALID_ARGUMENT" in str(info.value)  # a domain error: the status is in the text
    assert fragment in str(info.value)
    assert "grad" in str(info.value)
    assert servicer.calls == 0  # rejected before the handler did anything


def test_bad_sparse_rows_rejected(echo_server: tuple[str, EchoServicer]) -> None:
    address, servicer = echo_server
    bad = common_pb2.SparseRows(
        ids=encode_tensor(np.arange(3, dtype=np.int64)),
        rows=encode_tensor(np.zeros((2, 3), dtype=np.float32)),
    )
    with (
        client_channel(address) as channel,
        pytest.raises(InvalidArgumentError, match=r"push\.rows"),
    ):
        call(_stub(channel, "Sparse", common_pb2.SparseRows), bad)
    assert servicer.calls == 0


@pytest.mark.parametrize("token", [None, "", "wrong-token", TOKEN + "x", "x" * 5000])
def test_calls_without_the_job_token_are_refused(
    echo_server: tuple[str, EchoServicer], token: str | None
) -> None:
    """A peer with a job certificate but not the token (the second factor) is refused."""
    address, servicer = echo_server
    metadata = None if token is None else (("x-elasticps-token", token),)
    with tls_channel_without_token(address) as channel, \
            pytest.raises(UnauthenticatedError) as info:
        call(functools.partial(_stub(channel, "Echo"), metadata=metadata),
             encode_tensor(np.ones(2, dtype=np.float32)), what="Echo")
    assert info.value.code == "UNAUTHENTICATED"
    assert servicer.calls == 0


def test_an_insecure_job_serves_plaintext_with_the_token() -> None:
    """--insecure: no TLS on either side, the token still required."""
    creds = JobCredentials(JOB, TOKEN)
    servicer = EchoServicer()
    server = make_server(creds, max_workers=2)
    _add(server, servicer)
    port = bind(server, "127.0.0.1", 0, creds)
    server.start()
    try:
        with make_channel(f"127.0.0.1:{port}", creds, "pserver") as channel:
            back = call(_stub(channel, "Echo"), encode_tensor(np.ones(2, dtype=np.float32)))
        np.testing.assert_array_equal(decode_tensor(back), np.ones(2, dtype=np.float32))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as bare, \
                pytest.raises(UnauthenticatedError):
            call(_stub(bare, "Echo"), encode_tensor(np.ones(2, dtype=np.float32)))
    finally:
        server.stop(grace=None)
    assert servicer.calls == 1


def test_unavailable_is_retried_until_the_server_appears() -> None:
    servicer = EchoServicer()
    # A port nothing listens on yet; this test's own server binds it once the client retries.
    port = free_port()

    attempts = 0
    result: dict[str, Any] = {}

    with client_channel(f"127.0.0.1:{port}") as channel:
        stub = _stub(channel, "Echo")

        def counted(request: Any, timeout: float) -> Any:
            nonlocal attempts
            attempts += 1
            return stub(request, timeout=timeout, wait_for_ready=False)

        def client() -> None:
            try:
                result["reply"] = call(counted, encode_tensor(np.ones(3, dtype=np.float32)),
                                       timeout=2.0, retry=RETRY_UNAVAILABLE.within(20.0))
            except Exception as exc:  # reported through `result`
                result["error"] = exc

        thread = threading.Thread(target=client)
        thread.start()
        deadline = time.monotonic() + 10
        while attempts < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # polling the attempt counter, with a deadline
        assert attempts >= 2, "client never retried"
        server = make_server(SERVER, max_workers=2)
        _add(server, servicer)
        assert bind(server, "127.0.0.1", port, SERVER) == port
        server.start()
        try:
            thread.join(timeout=30)
        finally:
            server.stop(grace=None)
    assert "error" not in result, result.get("error")
    np.testing.assert_array_equal(decode_tensor(result["reply"]), np.ones(3, dtype=np.float32))


def test_unavailable_raised_after_retry_window() -> None:
    with client_channel(f"127.0.0.1:{free_port()}") as channel:
        started = time.monotonic()
        with pytest.raises(UnavailableError):
            call(_stub(channel, "Echo"), encode_tensor(np.ones(1, dtype=np.float32)),
                 timeout=1.0, retry=RETRY_UNAVAILABLE.within(0.5))
        assert time.monotonic() - started >= 0.5


def test_health_is_open_to_probes_and_reports_readiness() -> None:
    """The kubelet speaks plaintext and sends no token: it probes the separate health port,
    which serves grpc.health and nothing else. On the main port health is an RPC like the
    others: mutual TLS and the token (a tokenless call there would be read before refused)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from elasticps.rpc.health import add_health, serve_health, set_serving

    server = make_server(SERVER, max_workers=2)
    servicer = add_health(server)
    _add(server, EchoServicer())
    port = bind(server, "127.0.0.1", 0, SERVER)
    server.start()
    probes, health_port = serve_health(servicer, "127.0.0.1", 0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{health_port}") as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            request = health_pb2.HealthCheckRequest(service="")
            assert call(check, request).status == health_pb2.HealthCheckResponse.NOT_SERVING
            set_serving(servicer, True)
            assert call(check, request).status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(RemoteError, match="UNIMPLEMENTED"):
                call(_stub(channel, "Echo"), encode_tensor(np.ones(1, dtype=np.float32)))
        with tls_channel_without_token(f"127.0.0.1:{port}") as channel:
            with pytest.raises(UnauthenticatedError):
                call(health_pb2_grpc.HealthStub(channel).Check,
                     health_pb2.HealthCheckRequest(service=""))
            with pytest.raises(UnauthenticatedError):
                call(_stub(channel, "Echo"), encode_tensor(np.ones(1, dtype=np.float32)))
        with client_channel(f"127.0.0.1:{port}") as channel:
            assert call(health_pb2_grpc.HealthStub(channel).Check,
                        health_pb2.HealthCheckRequest(service="")).status == \
                health_pb2.HealthCheckResponse.SERVING
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain, \
                pytest.raises(UnavailableError):
            call(health_pb2_grpc.HealthStub(plain).Check,
                 health_pb2.HealthCheckRequest(service=""), timeout=5)
    finally:
        probes.stop(grace=None)
        server.stop(grace=None)
