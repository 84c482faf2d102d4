"""The standard ``grpc.health.v1`` service, for Kubernetes readiness probes.

The overall service ``""`` reports NOT_SERVING until the role says it is ready (the master holds
the election lock; a pserver has claimed its slot and restored). On the role's main port it is
an RPC like any other (mutual TLS and the job token).

The kubelet's gRPC probes speak plaintext and carry no token, so a role also serves this one
service, and nothing else, on a separate plaintext port (``PADDLE_HEALTH_PORT``) whose requests
are limited to 1 KiB: :func:`serve_health`. The answer reveals nothing but readiness.
"""

from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from elasticps.rpc.server import bind_port


def add_health(server: grpc.Server) -> health.HealthServicer:
    """Register the health service on ``server``, reporting NOT_SERVING until told otherwise."""
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    set_serving(servicer, False)
    return servicer


def set_serving(servicer: health.HealthServicer, serving: bool) -> None:
    status = (health_pb2.HealthCheckResponse.SERVING if serving
              else health_pb2.HealthCheckResponse.NOT_SERVING)
    servicer.set("", status)


def serve_health(servicer: health.HealthServicer, host: str,
                 port: int) -> tuple[grpc.Server, int]:
    """A started plaintext server on ``host:port`` (0 = any free port) with nothing but
    ``servicer``: no token, no TLS, and requests of at most 1 KiB (a health check is a few
    bytes). Returns it and its port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="health"),
                         options=(("grpc.max_receive_message_length", 1024),
                                  ("grpc.max_concurrent_streams", 4),
                                  ("grpc.so_reuseport", 0)),
                         maximum_concurrent_rpcs=8)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = bind_port(server.add_insecure_port, host, port, "the health probe server",
                      "PADDLE_HEALTH_PORT")
    server.start()
    return server, bound
