"""Every RPC counted by method and status code, on a real pserver service over loopback (mutual
TLS, the job token): answers, a servicer's error, the token check's refusal, and the client's
count of each attempt, naming the shard it called."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from elasticps.errors import NotFoundError, UnauthenticatedError
from elasticps.proto import pserver_pb2, pserver_pb2_grpc
from elasticps.pserver.service import ParameterServerServicer
from elasticps.pserver.shard import ShardState
from elasticps.rpc import bind, call, encode_tensor, make_channel, make_server
from elasticps.rpc.call_metrics import ClientCallMetrics, ServerCallMetrics, split_method
from tests.helpers import job_credentials

JOB = "call-metrics"
SERVER = job_credentials(JOB, "pserver")
CLIENT = job_credentials(JOB, "trainer")
SERVICE = "elasticps.v1.ParameterServer"


@pytest.fixture
def served() -> Iterator[tuple[str, CollectorRegistry]]:
    registry = CollectorRegistry()
    server = make_server(SERVER, max_workers=4, call_metrics=ServerCallMetrics(registry))
    servicer = ParameterServerServicer(ShardState(0, 1), "inc-1", lambda: "", None)
    pserver_pb2_grpc.add_ParameterServerServicer_to_server(servicer, server)
    port = bind(server, "127.0.0.1", 0, SERVER)
    server.start()
    yield f"127.0.0.1:{port}", registry
    server.stop(grace=None)


def handled(registry: CollectorRegistry, side: str, **labels: str) -> float:
    return registry.get_sample_value(f"grpc_{side}_handled_total", labels) or 0.0


def test_servers_and_clients_count_every_call_by_method_and_code(
        served: tuple[str, CollectorRegistry]) -> None:
    address, server_registry = served
    client_registry = CollectorRegistry()
    channel = make_channel(address, CLIENT, "pserver",
                           call_metrics=ClientCallMetrics(client_registry), shard=0)
    stub = pserver_pb2_grpc.ParameterServerStub(channel)
    try:
        for _ in range(2):
            call(stub.Stats, pserver_pb2.StatsRequest(), timeout=5)
        unknown = pserver_pb2.PullSparseRequest(
            table="nope", ids=encode_tensor(np.array([1], dtype=np.int64)))
        with pytest.raises(NotFoundError):
            call(stub.PullSparse, unknown, timeout=5)
        tokenless = job_credentials(JOB, "trainer", token="wrong")
        other = make_channel(address, tokenless, "pserver")
        with pytest.raises(UnauthenticatedError):
            call(pserver_pb2_grpc.ParameterServerStub(other).Stats, pserver_pb2.StatsRequest(),
                 timeout=5)
        made_up = other.unary_unary(f"/{SERVICE}/MadeUp{id(other)}",
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=pserver_pb2.StatsResponse.FromString)
        with pytest.raises(grpc.RpcError):
            made_up(pserver_pb2.StatsRequest(), timeout=5)
        other.close()
    finally:
        channel.close()

    def server(method: str, code: str) -> float:
        return handled(server_registry, "server", grpc_service=SERVICE, grpc_method=method,
                       grpc_code=code)

    assert server("Stats", "OK") == 2
    assert server("PullSparse", "NOT_FOUND") == 1
    # refused before the request was read, and before its method name was checked: counted
    # without one, so a caller cannot make up series
    assert handled(server_registry, "server", grpc_service="", grpc_method="",
                   grpc_code="UNAUTHENTICATED") == 2
    assert not [s for m in server_registry.collect() for s in m.samples
                if "MadeUp" in s.labels.get("grpc_method", "")]
    assert handled(client_registry, "client", grpc_service=SERVICE, grpc_method="Stats",
                   grpc_code="OK", shard="0") == 2
    assert handled(client_registry, "client", grpc_service=SERVICE, grpc_method="PullSparse",
                   grpc_code="NOT_FOUND", shard="0") == 1


def test_a_call_that_never_reaches_a_server_is_counted_with_its_code() -> None:
    registry = CollectorRegistry()
    channel = make_channel("127.0.0.1:1", CLIENT, "pserver",
                           call_metrics=ClientCallMetrics(registry))
    try:
        with pytest.raises(grpc.RpcError):
            pserver_pb2_grpc.ParameterServerStub(channel).Stats(pserver_pb2.StatsRequest(),
                                                                timeout=2)
    finally:
        channel.close()
    assert handled(registry, "client", grpc_service=SERVICE, grpc_method="Stats",
                   grpc_code="UNAVAILABLE", shard="") == 1


def test_method_names_split_into_service_and_method() -> None:
    assert split_method("/elasticps.v1.Master/GetTask") == ("elasticps.v1.Master", "GetTask")
    assert split_method(b"/grpc.health.v1.Health/Check") == ("grpc.health.v1.Health", "Check")
