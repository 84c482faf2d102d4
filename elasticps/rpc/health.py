"""The standard ``grpc.health.v1`` service, for Kubernetes readiness probes.

The overall service ``""`` reports NOT_SERVING until the role says it is ready (the master holds
the election lock; a pserver has claimed its slot and restored). Health calls are the one thing
the token interceptor lets through: the kubelet sends no token, and the answer reveals nothing.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"


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
