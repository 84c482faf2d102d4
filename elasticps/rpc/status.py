"""The one place where gRPC status codes and the elasticps exception tree meet.

Clients: every ``grpc.RpcError`` goes through :func:`raise_for_rpc_error`.
Servers: every ``ElasticPSError`` raised in a handler goes through :func:`status_for`.

The domain errors (:class:`~elasticps.errors.InvalidArgumentError`, ``NotFoundError``,
``FailedPreconditionError``) know nothing of gRPC; this module alone maps them to status codes
and back, so the same class reaches a caller whether the error was raised in-process or remotely.
Transport failures become :class:`~elasticps.errors.RPCError` subclasses carrying the status name.
"""

from __future__ import annotations

from typing import NoReturn

import grpc

import elasticps.errors as errors

_CLIENT_MAP: dict[grpc.StatusCode, type[errors.ElasticPSError]] = {
    grpc.StatusCode.UNAVAILABLE: errors.UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.UnavailableError,
    # A server that stops (a pserver's graceful exit before a resharding) cancels the calls
    # still in flight: the peer, or its successor, comes back.
    grpc.StatusCode.CANCELLED: errors.UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: errors.UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: errors.UnauthenticatedError,
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: errors.InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: errors.NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPreconditionError,
    grpc.StatusCode.ABORTED: errors.LayoutChangedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhaustedError,
}

# Most specific class first: status_for walks this list with isinstance.
_SERVER_MAP: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (errors.UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (errors.LayoutChangedError, grpc.StatusCode.ABORTED),
    (errors.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFoundError, grpc.StatusCode.NOT_FOUND),
    (errors.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.NotLeaderError, grpc.StatusCode.UNAVAILABLE),  # clients should find the new leader
    (errors.UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (errors.StoreUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (errors.ConfigError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.CheckpointError, grpc.StatusCode.FAILED_PRECONDITION),
)


# RESOURCE_EXHAUSTED has three senders, told apart by the message text alone:
# - gRPC's server at its concurrent-call limit, "Concurrent RPC limit exceeded!": worth a retry;
# - gRPC on a message over a size limit, "Sent/Received message larger than max (N vs. M)": the
#   same call never gets better;
# - our servicers, a request over a cap of the job (ids, tables, memory) that changed nothing:
#   the domain's ResourceExhaustedError, not retried either.
_CALL_LIMIT = "Concurrent RPC limit exceeded"
_TOO_LARGE = "larger than max"


def client_error_class(code: grpc.StatusCode, details: str) -> type[errors.ElasticPSError]:
    """The class of the elasticps exception tree a call failing with ``code`` raises."""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if _CALL_LIMIT in details:
            return errors.OverloadedError
        if _TOO_LARGE in details:
            return errors.RemoteError
    return _CLIENT_MAP.get(code, errors.RemoteError)


def raise_for_rpc_error(exc: grpc.RpcError, what: str = "call") -> NoReturn:
    """Re-raise a gRPC error as the matching class of the elasticps exception tree."""
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    cls = client_error_class(code, details or "")
    message = f"{what} failed with {code.name}: {details}"
    if issubclass(cls, errors.RPCError):
        raise cls(message, code=code.name) from exc
    raise cls(message) from exc


def status_for(exc: BaseException) -> grpc.StatusCode:
    """The status code a server answers for ``exc``."""
    for cls, code in _SERVER_MAP:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL
