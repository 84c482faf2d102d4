"""The one place where gRPC status codes and the elasticps exception tree meet.

Clients: every ``grpc.RpcError`` goes through :func:`raise_for_rpc_error`.
Servers: every ``ElasticPSError`` raised in a handler (or refused by an interceptor) is
answered by :func:`abort_for`: the status code of :func:`status_for`, and the trailing metadata
``x-elasticps-error: <ErrorClassName>`` (:data:`ERROR_METADATA_KEY`) that marks the answer as
an elasticps servicer's own.

The domain errors (:class:`~elasticps.errors.InvalidArgumentError`, ``NotFoundError``,
``FailedPreconditionError``, ``ResourceExhaustedError``) know nothing of gRPC; this module
alone maps them to status codes and back, so the same class reaches a caller whether the error
was raised in-process or remotely. Transport failures become
:class:`~elasticps.errors.RPCError` subclasses carrying the status name.

A client maps a failure by its code and that marker, never by an elasticps message's text. The
one exception is gRPC's own RESOURCE_EXHAUSTED refusals (its concurrent-call limit and its
message-size limits), which carry neither a code of their own nor metadata: only an unmarked
RESOURCE_EXHAUSTED is looked at by text, in :func:`grpc_resource_exhausted_class` alone.
"""

from __future__ import annotations

from typing import NoReturn

import grpc

import elasticps.errors as errors

# Trailing metadata on every status an elasticps server sends for an ElasticPSError: the class
# name of the error (e.g. "ResourceExhaustedError"). gRPC's own refusals never carry it.
ERROR_METADATA_KEY = "x-elasticps-error"

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


# RESOURCE_EXHAUSTED has three senders:
# - our servicers, a request over a cap of the job (ids, tables, memory) that changed nothing:
#   the domain's ResourceExhaustedError (not retried), told by the x-elasticps-error marker;
# - gRPC's server at its concurrent-call limit, "Concurrent RPC limit exceeded!": worth a retry;
# - gRPC on a message over a size limit, "Sent/Received message larger than max (N vs. M)": the
#   same call never gets better.
# gRPC answers the last two with no metadata, so only their text tells them apart (see
# grpc_resource_exhausted_class). The call limit stays gRPC's (make_server's
# maximum_concurrent_rpcs): it refuses in its polling thread, before a worker is taken, and
# counts a call until its worker is done with it; an interceptor has no hook for the end of a
# call that a worker never ran (cancelled while queued), so a limit of its own could leak.
_CALL_LIMIT = "Concurrent RPC limit exceeded"
_TOO_LARGE = "larger than max"


def grpc_resource_exhausted_class(details: str) -> type[errors.ElasticPSError]:
    """The class of a RESOURCE_EXHAUSTED that carries no elasticps marker, from gRPC's text.

    gRPC's call limit (:class:`~elasticps.errors.OverloadedError`, retried) and its message
    size limits (:class:`~elasticps.errors.RemoteError`, never retried) have no other mark.
    Anything else unmarked is taken for a servicer's :class:`ResourceExhaustedError` (a peer
    from before the marker)."""
    if _CALL_LIMIT in details:
        return errors.OverloadedError
    if _TOO_LARGE in details:
        return errors.RemoteError
    return errors.ResourceExhaustedError


def client_error_class(code: grpc.StatusCode, details: str,
                       error: str | None = None) -> type[errors.ElasticPSError]:
    """The class of the elasticps exception tree a call failing with ``code`` raises.

    ``error`` is the answer's :data:`ERROR_METADATA_KEY` marker: the class name of the error an
    elasticps servicer raised, or None when gRPC itself (or a foreign peer) answered. A marked
    answer maps by its code alone, whatever its message says."""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and error is None:
        return grpc_resource_exhausted_class(details)
    return _CLIENT_MAP.get(code, errors.RemoteError)


def error_marker(exc: grpc.RpcError) -> str | None:
    """The :data:`ERROR_METADATA_KEY` marker of a failed call, None if it carries none."""
    if not isinstance(exc, grpc.Call):
        return None
    for key, value in exc.trailing_metadata() or ():
        if key == ERROR_METADATA_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def raise_for_rpc_error(exc: grpc.RpcError, what: str = "call") -> NoReturn:
    """Re-raise a gRPC error as the matching class of the elasticps exception tree."""
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    cls = client_error_class(code, details or "", error_marker(exc))
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


def abort_for(context: grpc.ServicerContext, exc: errors.ElasticPSError) -> NoReturn:
    """Answer the call of ``context`` with ``exc``: its status code, its message, and the
    :data:`ERROR_METADATA_KEY` marker naming its class."""
    context.set_trailing_metadata(((ERROR_METADATA_KEY, type(exc).__name__),))
    context.abort(status_for(exc), str(exc))
