"""Every RPC's outcome counted by service, method and status code, on servers and on clients.

Names and labels are go-grpc-prometheus's (grpc-ecosystem), which its Python ports
(py-grpc-prometheus) copy: ``grpc_server_handled_total`` and ``grpc_client_handled_total``
with ``grpc_service``, ``grpc_method`` and ``grpc_code``, OK included, so an error ratio is one
division and dashboards made for those libraries read these counters too. The library itself
is not used: it counts into the process-global registry (every elasticps role has its own,
and tests run several roles in one process) and reads the servicer context's private state
for the code, where ``ServicerContext.code()`` says it. Every elasticps RPC is unary: no
``grpc_type`` label, no stream-message counters.

A client counter names the pserver ``shard`` it called (empty, so absent, for the master).
Labels stay bounded: the server names only methods it has a handler for (gRPC answers an
unknown method UNIMPLEMENTED without one), the client only the methods its stubs call. A call
the token check refuses is counted without service and method (``grpc_code`` UNAUTHENTICATED
only): its method name, which the caller chose, was never checked against the services.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import grpc
from prometheus_client import CollectorRegistry, Counter

_LABELS = ["grpc_service", "grpc_method", "grpc_code"]
Refused = Callable[[grpc.RpcMethodHandler], bool]


def split_method(full: str | bytes) -> tuple[str, str]:
    """``/elasticps.master.Master/GetTask`` -> (``elasticps.master.Master``, ``GetTask``)."""
    text = full.decode() if isinstance(full, bytes) else full
    service, _, method = text.lstrip("/").rpartition("/")
    return service, method


class ServerCallMetrics:
    """``grpc_server_handled_total``; :meth:`interceptor` counts every call a server ends."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.handled = Counter("grpc_server_handled", "RPCs completed on the server, by "
                               "status code", _LABELS, registry=registry)

    def interceptor(self, refused: Refused = lambda handler: False) -> grpc.ServerInterceptor:
        """The outermost interceptor; ``refused`` tells the token check's refusals."""
        return _ServerInterceptor(self.handled, refused)


class ClientCallMetrics:
    """``grpc_client_handled_total``; :meth:`interceptor` counts every call a channel ends."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.handled = Counter("grpc_client_handled", "RPCs completed by the client, by status "
                               "code (each attempt of a retried call)", [*_LABELS, "shard"],
                               registry=registry)

    def interceptor(self, shard: int | None = None) -> grpc.UnaryUnaryClientInterceptor:
        """For a channel to pserver ``shard`` (None: the master)."""
        return _ClientInterceptor(self.handled, "" if shard is None else str(shard))


class _ServerInterceptor(grpc.ServerInterceptor):
    """Outermost interceptor: it also sees the token check's refusals (UNAUTHENTICATED)."""

    def __init__(self, handled: Counter, refused: Refused) -> None:
        self._handled = handled
        self._refused = refused
        # wrapped handlers by (method, handler): building one per call would cost more than
        # the count. The handler is kept with its wrapper, so its id cannot be reused.
        self._wrapped: dict[tuple[str | bytes, int], tuple[grpc.RpcMethodHandler,
                                                           grpc.RpcMethodHandler]] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.response_streaming:  # unknown, or health's Watch
            return handler
        # a refusal is one entry whatever the method name its caller made up
        refused = self._refused(handler)
        key = ("" if refused else handler_call_details.method, id(handler))
        known = self._wrapped.get(key)
        if known is None:
            names = ("", "") if refused else split_method(handler_call_details.method)
            known = (handler, self._wrap(handler, *names))
            self._wrapped[key] = known
        return known[1]

    def _wrap(self, handler: grpc.RpcMethodHandler, service: str,
              method: str) -> grpc.RpcMethodHandler:
        handled = self._handled
        behavior = handler.stream_unary if handler.request_streaming else handler.unary_unary
        assert behavior is not None, "a unary-response handler has its behavior"

        answered = handled.labels(service, method, "OK")  # the common case, bound once

        def counted(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                response = behavior(request, context)
            except BaseException:  # context.abort() raises once it set the code
                handled.labels(service, method, _name(_code(context), "UNKNOWN")).inc()
                raise
            code = _code(context)
            if code is None or code is grpc.StatusCode.OK:
                answered.inc()
            else:
                handled.labels(service, method, _name(code, "OK")).inc()
            return response

        make = (grpc.stream_unary_rpc_method_handler if handler.request_streaming
                else grpc.unary_unary_rpc_method_handler)
        return make(counted, request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)


class _ClientInterceptor(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, handled: Counter, shard: str) -> None:
        self._handled = handled
        self._shard = shard
        self._answered: dict[str | bytes, Any] = {}  # method -> its OK child, bound once

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        outcome = continuation(client_call_details, request)
        # an outcome or a raised-then-returned RpcError: both are done, or will call back
        outcome.add_done_callback(lambda done: self._count(client_call_details.method, done))
        return outcome

    def _count(self, full: str | bytes, done: Any) -> None:
        code = done.code()
        if code is grpc.StatusCode.OK:
            answered = self._answered.get(full)
            if answered is None:
                answered = self._handled.labels(*split_method(full), "OK", self._shard)
                self._answered[full] = answered
            answered.inc()
        else:
            self._handled.labels(*split_method(full), _name(code, "UNKNOWN"), self._shard).inc()


def _code(context: grpc.ServicerContext) -> Any:
    """The code the call will end with (``ServicerContext.code()``, public since grpcio 1.38;
    grpc-stubs lacks it)."""
    return cast(Any, context).code()


def _name(code: grpc.StatusCode | None, otherwise: str) -> str:
    return code.name if isinstance(code, grpc.StatusCode) else otherwise
