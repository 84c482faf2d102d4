"""Client side of RPC: channels that verify the server and carry the job token, and
:func:`call` with a deadline per attempt and, optionally, a :class:`~elasticps.retry.RetryPolicy`.

A channel to a server of role R (master or pserver) trusts only the job's CA and requires the
server's certificate to name R of this job (:func:`~elasticps.rpc.tls.peer_options`). gRPC
checks both during the TLS handshake, before the first request (and the token in its headers)
is sent, so an address forged in the store reaches an impostor that learns nothing; the call
fails UNAVAILABLE and the handshake error is in the message.

Invoke stubs only through :func:`call`, so every failure is translated to the elasticps
exception tree in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from elasticps.errors import OverloadedError, UnavailableError
from elasticps.retry import RetryPolicy
from elasticps.rpc.call_metrics import ClientCallMetrics
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.error_codes import raise_for_rpc_error
from elasticps.rpc.server import CHANNEL_OPTIONS, TOKEN_METADATA_KEY
from elasticps.rpc.tls import peer_options

Response = TypeVar("Response")

# Retry a peer that is down, slow (UNAVAILABLE, DEADLINE_EXCEEDED) or full (RESOURCE_EXHAUSTED
# by its call limit); give it a deadline with ``.within(seconds)``. Every other failure is an
# answer, not an outage, and is raised at once.
RETRY_UNAVAILABLE = RetryPolicy(deadline=0.0, initial_backoff=0.05, max_backoff=2.0,
                                retryable=(UnavailableError, OverloadedError))


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


def make_channel(address: str, credentials: JobCredentials, role: str, *,
                 call_metrics: ClientCallMetrics | None = None,
                 shard: int | None = None) -> grpc.Channel:
    """A channel to ``host:port``, where ``role`` of the job must serve, that sends the job
    token with every call. TLS (verifying the CA and the role) unless the job is insecure.
    With ``call_metrics`` every call's outcome is counted (naming pserver ``shard``)."""
    if credentials.tls is None:
        channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    else:
        channel = grpc.secure_channel(address, credentials.tls.channel_credentials(),
                                      options=(*CHANNEL_OPTIONS,
                                               *peer_options(credentials.job, role)))
    interceptors: list[grpc.UnaryUnaryClientInterceptor] = [_TokenAuth(credentials.token)]
    if call_metrics is not None:
        interceptors.insert(0, call_metrics.interceptor(shard))
    return grpc.intercept_channel(channel, *interceptors)


def call(
    method: Callable[..., Response],
    request: Any,
    *,
    timeout: float = 30.0,
    retry: RetryPolicy | None = None,
    what: str | None = None,
    metadata: tuple[tuple[str, str], ...] = (),
) -> Response:
    """Invoke ``method(request)`` with a deadline of ``timeout`` seconds per attempt.

    Every failure is raised as a class of the elasticps exception tree. With ``retry`` (e.g.
    ``RETRY_UNAVAILABLE.within(20)``) the failures it names are retried with its backoff until
    its deadline; without, one attempt: a caller that retries on its own (the master and pserver
    clients) passes none, so exactly one layer retries. ``metadata`` goes with the call (the
    job token is added by the channel).
    """
    name = what or getattr(method, "_method", None) or "rpc"
    if isinstance(name, bytes):
        name = name.decode()

    def attempt() -> Response:
        try:
            if metadata:
                return method(request, timeout=timeout, metadata=metadata)
            return method(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise_for_rpc_error(exc, what=str(name))

    if retry is None:
        return attempt()
    return retry.call(attempt, what=str(name))
