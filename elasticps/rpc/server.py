"""gRPC server helpers: TLS, receive limits, keepalive, the job-token check, error mapping.

Every server elasticps runs is made by :func:`make_server` and bound by :func:`bind`, so on
every call on every service:

1. the TLS handshake (unless the job is insecure) has already required a client certificate
   from the job's CA: a peer without one never gets to send a request;
2. :class:`TokenInterceptor` checks the job token from the call's headers **before the request
   message is read**: a refused call is answered UNAUTHENTICATED by a handler that never asks
   for the message, so its body stays in the peer's send buffer (HTTP/2 flow control holds it
   to one stream window), not in our memory;
3. at most ``max_concurrent_rpcs`` calls run at once (more are refused before they are read),
   at most :data:`MAX_STREAMS_PER_CONNECTION` per connection, and no message larger than the
   server's receive limit is accepted.
"""

from __future__ import annotations

import functools
import hmac
import logging
import socket
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, TypeVar

import grpc

from elasticps.config import DEFAULT_MAX_CONCURRENT_RPCS, listen_error
from elasticps.errors import ConfigError, ElasticPSError, UnauthenticatedError
from elasticps.rpc.call_metrics import ServerCallMetrics
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.error_codes import abort_for

log = logging.getLogger(__name__)

TOKEN_METADATA_KEY = "x-elasticps-token"
# The pserver shard count a call was routed for; a pserver of another layout refuses it.
SHARDS_METADATA_KEY = "x-elasticps-shards"
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
MAX_STREAMS_PER_CONNECTION = 32  # a trainer keeps a few calls in flight per server
MAX_TOKEN_BYTES = 1024  # a longer header is refused without comparing it

CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # gRPC's default reconnect backoff grows to 120 s; a peer back from a restart or a healed
    # partition should be reached again within seconds.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
)


def server_options(max_receive_bytes: int) -> tuple[tuple[str, Any], ...]:
    return (
        *[(k, v) for k, v in CHANNEL_OPTIONS if k != "grpc.max_receive_message_length"],
        ("grpc.max_receive_message_length", max_receive_bytes),
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.so_reuseport", 0),  # a second server must not silently share a port
    )


def _deny(message: str) -> grpc.RpcMethodHandler:
    """A handler that answers UNAUTHENTICATED without reading the request.

    It is registered as request-streaming whatever the method is: gRPC reads a unary request
    in full before calling its handler, but a streaming one only when the handler iterates it,
    which this one never does. (Unary and streaming calls look the same on the wire.)
    """

    def abort(requests: Iterator[Any], context: grpc.ServicerContext) -> None:
        abort_for(context, UnauthenticatedError(message))

    return grpc.stream_unary_rpc_method_handler(abort)


MISSING_TOKEN = "missing job token (metadata x-elasticps-token)"
WRONG_TOKEN = "wrong job token"


def token_refusal(invocation_metadata: Any, token: bytes) -> str | None:
    """Why a call with these headers is refused (:data:`MISSING_TOKEN`, :data:`WRONG_TOKEN`),
    or None when it carries the job token. Constant-time; an oversized token is not compared."""
    for key, value in invocation_metadata or ():
        if key == TOKEN_METADATA_KEY:
            sent = value.encode() if isinstance(value, str) else value
            break
    else:
        return MISSING_TOKEN
    if len(sent) > MAX_TOKEN_BYTES or not hmac.compare_digest(sent, token):
        return WRONG_TOKEN
    return None


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every call whose ``x-elasticps-token`` metadata is not the job token, before its
    request is read. The health service is no exception: a tokenless call to it would be read
    in full (up to the receive limit) before its handler ran. Probes, which carry no token, go
    to the separate health-only port with its 1 KiB limit (:func:`.health.serve_health`)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._denials = {MISSING_TOKEN: _deny(MISSING_TOKEN), WRONG_TOKEN: _deny(WRONG_TOKEN)}

    def refuses(self, handler: grpc.RpcMethodHandler) -> bool:
        """Whether ``handler`` is one of this check's refusals (for the call metrics)."""
        return any(handler is denial for denial in self._denials.values())

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        refusal = token_refusal(handler_call_details.invocation_metadata, self._token)
        if refusal is not None:
            return self._denials[refusal]
        return continuation(handler_call_details)


def make_server(credentials: JobCredentials, *, max_workers: int = 16,
                max_receive_bytes: int = MAX_MESSAGE_BYTES,
                max_concurrent_rpcs: int = DEFAULT_MAX_CONCURRENT_RPCS,
                call_metrics: ServerCallMetrics | None = None) -> grpc.Server:
    """A gRPC server that checks the job token on every call. Add servicers, then :func:`bind`
    (which adds TLS unless ``credentials`` are insecure). With ``call_metrics`` every call it
    ends is counted by method and status code, refusals of the token check included.

    Memory a peer can make it hold: requests are read only by a worker running an
    authenticated call, so at most ``max_workers x max_receive_bytes`` of request bodies.
    Calls beyond ``max_concurrent_rpcs`` (running or queued for a worker) are answered
    RESOURCE_EXHAUSTED unread; clients retry them (:class:`~elasticps.errors.OverloadedError`).
    """
    if max_concurrent_rpcs < 1:
        raise ConfigError(f"max_concurrent_rpcs={max_concurrent_rpcs!r} must be >= 1")
    if not credentials.token:
        raise ConfigError("a job token is required to start a server (set PADDLE_JOB_TOKEN)")
    token = TokenInterceptor(credentials.token)
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=[*([call_metrics.interceptor(token.refuses)] if call_metrics else []),
                      token],
        options=server_options(max_receive_bytes),
        maximum_concurrent_rpcs=max_concurrent_rpcs,
    )


def bind(server: grpc.Server, host: str, port: int, credentials: JobCredentials, *,
         setting: str = "PADDLE_PORT") -> int:
    """Bind ``host:port`` (0 = any free port, chosen by the kernel); returns the bound port.

    With TLS credentials the port speaks only TLS and requires a client certificate from the
    job's CA: a plaintext connection is refused. The process that serves binds the port itself
    and then publishes it through the store, so no other process can take it in between. A
    port it cannot bind is a ConfigError naming ``setting``, where the port came from.
    """
    def add(address: str) -> int:
        if credentials.tls is not None:
            return server.add_secure_port(address, credentials.tls.server_credentials())
        return server.add_insecure_port(address)

    return bind_port(add, host, port, "the gRPC server", setting)


def bind_port(add: Callable[[str], int], host: str, port: int, what: str, setting: str) -> int:
    """``add(address)`` (a gRPC server's add_*_port); a port it cannot bind is a ConfigError
    that says why (in use, no such address) and names ``setting``."""
    try:
        bound = add(f"{host}:{port}")
    except RuntimeError:  # grpc >= 1.60 raises where it returned 0
        bound = 0
    if bound == 0:
        raise listen_error(what, host, port, setting, _why_not_bound(host, port))
    return bound


def _why_not_bound(host: str, port: int) -> OSError:
    """gRPC does not say why a bind failed; a plain socket's bind to the same address does."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)
    except OSError as exc:
        return exc
    return OSError("gRPC could not bind it")


Handler = TypeVar("Handler", bound=Callable[..., Any])


def rpc_handler(method: Handler) -> Handler:
    """Decorate a servicer method: an ``ElasticPSError`` becomes the matching gRPC status,
    marked as ours (:func:`~elasticps.rpc.error_codes.abort_for`).

    Anything else is a bug: it is logged with its traceback and answered INTERNAL.
    """

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except ElasticPSError as exc:
            abort_for(context, exc)
        except Exception as exc:
            if isinstance(exc, grpc.RpcError) or type(exc).__name__ == "_AbortError":
                raise  # context.abort() inside the handler: already answered
            log.exception("Handler %s failed unexpectedly.", method.__qualname__)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]
