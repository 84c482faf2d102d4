"""Client side of RPC: channels that carry the job token, and :func:`call` with deadlines and
retry-with-backoff for UNAVAILABLE.

Invoke stubs only through :func:`call`, so every failure is translated to the elasticps
exception tree in one place.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from elasticps.rpc.server import CHANNEL_OPTIONS, TOKEN_METADATA_KEY
from elasticps.rpc.status import raise_for_rpc_error

log = logging.getLogger(__name__)

Response = TypeVar("Response")

_RETRYABLE = (grpc.StatusCode.UNAVAILABLE,)


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


def backoff_delays(initial: float = 0.05, maximum: float = 2.0) -> Any:
    """Exponential backoff with full jitter: 0.05, 0.1, 0.2, ... capped at ``maximum``."""
    delay = initial
    while True:
        yield random.uniform(delay / 2, delay)
        delay = min(delay * 2, maximum)


def call(
    method: Callable[..., Response],
    request: Any,
    *,
    timeout: float = 30.0,
    retry_unavailable_for: float = 0.0,
    what: str | None = None,
) -> Response:
    """Invoke ``method(request)`` with a deadline of ``timeout`` seconds per attempt.

    UNAVAILABLE is retried with exponential backoff for up to ``retry_unavailable_for`` seconds
    in total; every other failure (and the last UNAVAILABLE) is raised as an
    :class:`~elasticps.errors.RPCError` subclass.
    """
    name = what or getattr(method, "_method", None) or "rpc"
    if isinstance(name, bytes):
        name = name.decode()
    give_up_at = time.monotonic() + retry_unavailable_for
    delays = backoff_delays()
    while True:
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            remaining = give_up_at - time.monotonic()
            if code in _RETRYABLE and remaining > 0:
                delay = min(next(delays), remaining)
                log.debug("%s is unavailable; retrying in %.2fs.", name, delay)
                time.sleep(delay)  # backoff between attempts, not synchronisation
                continue
            raise_for_rpc_error(exc, what=str(name))
