"""The master role's process: a :class:`~elasticps.master.leader.Leader` with real servers.

A master process campaigns for ``master/election``; a standby blocks there until the leader's
lease vanishes. Once leader it loads ``master/state/`` (releasing tasks of trainers that are
gone), starts the gRPC and HTTP servers, and publishes ``master/address`` under the election
lease, so the address disappears with the leader. It stops serving and exits non-zero as soon
as it is no longer the leader (lease lost, or a fenced write refused); a supervisor (the
launcher, Kubernetes) restarts it and it becomes a standby. The states and their order are
:mod:`elasticps.master.leader`'s; this module supplies the sockets.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import Histogram

from elasticps.master.leader import Components, Leader
from elasticps.master.options import MasterOptions
from elasticps.master.service import (
    ChunkLister,
    MasterState,
    SourceFactory,
    data_chunk_lister,
    fsspec_source,
)
from elasticps.master.status_access import status_access
from elasticps.master.status_logs import LogFiles
from elasticps.master.status_page import StatusServer
from elasticps.master.telemetry import MasterMetrics, TimedMasterServicer
from elasticps.proto import master_pb2_grpc
from elasticps.pserver.client import PServerClient
from elasticps.rpc.call_metrics import ClientCallMetrics, ServerCallMetrics
from elasticps.rpc.health import add_health, serve_health, set_serving
from elasticps.rpc.server import bind, make_server
from elasticps.store.api import Store
from elasticps.telemetry.exporter import exposition
from elasticps.telemetry.role import RoleTelemetry

# The master's requests are small (names, ids, a dataset URL, a bounded failure reason).
MASTER_MAX_RECEIVE_BYTES = 4 * 1024 * 1024
# A master call mostly waits for its group commit (service.py): more workers waiting means
# more calls share each store transaction. Bounded memory: workers x MASTER_MAX_RECEIVE_BYTES.
MASTER_RPC_WORKERS = 64

__all__ = ["MasterOptions", "MasterServer", "serve_rpc", "serve_status"]


@contextlib.contextmanager
def serve_rpc(state: MasterState, options: MasterOptions, dispatch: Histogram,
              call_metrics: ServerCallMetrics | None = None) -> Iterator[int]:
    """The ``Master`` gRPC service (and grpc.health) on ``options.port``; yields the port."""
    server = make_server(options.credentials, max_workers=MASTER_RPC_WORKERS,
                         max_receive_bytes=MASTER_MAX_RECEIVE_BYTES,
                         max_concurrent_rpcs=options.max_concurrent_rpcs,
                         call_metrics=call_metrics)
    master_pb2_grpc.add_MasterServicer_to_server(TimedMasterServicer(state, dispatch), server)
    health = add_health(server)
    set_serving(health, True)  # only the elected leader serves at all
    port = bind(server, options.host, options.port, options.credentials,
                setting="PADDLE_PORT or --port")
    server.start()
    probes = (None if options.health_port is None
              else serve_health(health, options.host, options.health_port)[0])
    try:
        yield port
    finally:
        if probes is not None:
            probes.stop(grace=None)
        server.stop(grace=0.5)


@contextlib.contextmanager
def serve_status(state: MasterState, options: MasterOptions,
                 document: Callable[[], dict[str, Any]] | None = None,
                 metrics: Callable[[], bytes] | None = None) -> Iterator[int]:
    """The HTTP status page on ``options.http_host:http_port`` (``/``, ``/api/status`` =
    ``document()``, ``/metrics``); yields the port."""
    http = StatusServer(document or state.status, options.http_host, options.http_port,
                        metrics=metrics,
                        access=status_access(options.http_host, options.credentials),
                        port_setting="PADDLE_HTTP_PORT or --http-port",
                        logs=LogFiles(options.logs_dir))
    http.start()
    try:
        yield http.port
    finally:
        http.stop()


class MasterServer(Leader):
    """One master process. :meth:`run` blocks until stopped (0) or deposed (1).

    Every master process, leader or standby, serves its Prometheus metrics on
    ``options.metrics_port`` and publishes the URL at ``metrics/master/<node>``; the leader
    also serves the same text at ``STATUS_URL/metrics``.
    """

    def __init__(self, store: Store, options: MasterOptions,
                 chunk_lister: ChunkLister | None = None,
                 source_for: SourceFactory | None = None) -> None:
        if chunk_lister is None:  # the real data layer, limited to the job's URL schemes
            chunk_lister = functools.partial(data_chunk_lister, schemes=options.data_schemes)
        if source_for is None:  # streams under any fsspec URL of those schemes
            source_for = functools.partial(fsspec_source, schemes=options.data_schemes)
        self.telemetry = RoleTelemetry(options.job, "master", options.node)
        self.metrics = MasterMetrics(self.telemetry.registry, self._document)
        registry = self.telemetry.registry
        components = Components(
            rpc=functools.partial(serve_rpc, options=options, dispatch=self.metrics.dispatch,
                                  call_metrics=ServerCallMetrics(registry)),
            status=self._serve_status,
            shards=functools.partial(PServerClient, store, options.credentials,
                                     options.num_pservers, deadline=options.reconcile_timeout,
                                     name=options.node,
                                     call_metrics=ClientCallMetrics(registry)))
        super().__init__(store, options, chunk_lister, components,
                         observe_write=self.metrics.store_write.observe, source_for=source_for)

    def _document(self) -> dict[str, Any] | None:
        loop = self.status_loop
        return None if loop is None or not self.serving.is_set() else loop.document()

    def _serve_status(self, state: MasterState) -> contextlib.AbstractContextManager[int]:
        assert self.status_loop is not None, "the status loop starts before the status page"
        registry = self.telemetry.registry
        return serve_status(state, self.options, self.status_loop.document,
                            lambda: exposition(registry))

    def run(self) -> int:
        self.telemetry.start(self.options.host, self.options.metrics_port)
        try:
            self.telemetry.publish(self.store, self.options.lease_ttl)
            return super().run()
        finally:
            self.telemetry.close()
