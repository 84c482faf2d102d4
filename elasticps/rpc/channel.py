"""Client side of RPC: channels that carry the job token, and :func:`call` with a deadline per
attempt and, optionally, a :class:`~elasticps.retry.RetryPolicy`.

Invoke stubs only through :func:`call`, so every failure is translated to the elasticps
exception tree in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from elasticps.errors import UnavailableError
from elasticps.retry import RetryPolicy
from elasticps.rpc.server import CHANNEL_OPTIONS, TOKEN_METADATA_KEY
from elasticps.rpc.status import raise_for_rpc_error

Response = TypeVar("Response")

# Retry a peer that is down or slow (UNAVAILABLE, DEADLINE_EXCEEDED); give it a deadline with
# ``.within(seconds)``. Every other failure is an answer, not an outage, and is raised at once.
RETRY_UNAVAILABLE = RetryPolicy(deadline=0.0, initial_backoff=0.05, max_backoff=2.0,
                                retryable=(UnavailableError,))


class _TokenAuth(grpc.UnaryUnaryClientInterceptor):
    """Adds the job token to every call's metadata."""

    def __init__(self, token: str) -> None:
        self._metadata = ((TOKEN_METADATA_KEY, token),)

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        metadata = tuple(client_call_details.metadata or ()) + self._metadata
        details = client_call_details._replace(metadata=metadata)
        return continuation(details, request)


def make_channel(address: str, token: str) -> grpc.Channel:
    """An insecure channel to ``host:port`` that sends ``token`` with every call."""
    channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.intercept_channel(channel, _TokenAuth(token))


def call(
    method: Callable[..., Response],
    request: Any,
    *,
    timeout: float = 30.0,
    retry: RetryPolicy | None = None,
    what: str | None = None,
) -> Response:
    """Invoke ``method(request)`` with a deadline of ``timeout`` seconds per attempt.

    Every failure is raised as a class of the elasticps exception tree. With ``retry`` (e.g.
    ``RETRY_UNAVAILABLE.within(20)``) the failures it names are retried with its backoff until
    its deadline; without, one attempt: a caller that retries on its own (the master and pserver
    clients) passes none, so exactly one layer retries.
    """
    name = what or getattr(method, "_method", None) or "rpc"
    if isinstance(name, bytes):
        name = name.decode()

    def attempt() -> Response:
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise_for_rpc_error(exc, what=str(name))

    if retry is None:
        return attempt()
    return retry.call(attempt, what=str(name))
