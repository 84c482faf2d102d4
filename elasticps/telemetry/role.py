"""One role process's telemetry: its registry, its exporter and its published endpoint."""

from __future__ import annotations

import logging

from prometheus_client.registry import Collector

from elasticps.store.api import Store
from elasticps.store.keys import MetricsEndpoint
from elasticps.telemetry.endpoint import EndpointPublication
from elasticps.telemetry.exporter import IdentityRegistry, MetricsExporter, new_registry

log = logging.getLogger(__name__)


class RoleTelemetry:
    """Start with :meth:`start` (binds the port), :meth:`publish` once the store is open,
    :meth:`close` on the way out (unpublishes, then stops serving).

    ``node`` names the process in the store (``metrics/<role>/<node>``) and in log lines;
    the series are labelled ``job``, ``role`` and ``labels`` (a trainer's ``trainer`` index, a
    pserver's ``shard`` once known), never with the node, which may carry a PID.
    """

    def __init__(self, job: str, role: str, node: str, **labels: str) -> None:
        self.job, self.role, self.node = job, role, node
        self.registry: IdentityRegistry = new_registry({"job": job, "role": role, **labels})
        self.exporter: MetricsExporter | None = None
        self.publication: EndpointPublication | None = None

    def register(self, *collectors: Collector) -> None:
        for collector in collectors:
            self.registry.register(collector)

    def start(self, host: str, port: int) -> str:
        """Serve the metrics; returns their URL."""
        self.exporter = MetricsExporter(self.registry, host, port)
        log.info("%s %s of job %s serves Prometheus metrics at %s.", self.role, self.node,
                 self.job, self.exporter.url)
        return self.exporter.url

    def publish(self, store: Store, ttl: int) -> None:
        """``metrics/<role>/<node>`` in the store, for as long as this process lives."""
        if self.exporter is None or self.publication is not None:
            return
        endpoint = MetricsEndpoint(self.role, self.node, self.exporter.url)
        self.publication = EndpointPublication(store, endpoint, ttl).start()

    def rename(self, node: str, **labels: str) -> None:
        """The process learned its name (a pserver its slot): relabel and republish."""
        self.node = node
        self.registry.relabel(**labels)
        if self.publication is not None:
            self.publication.rename(node)

    def close(self) -> None:
        publication, self.publication = self.publication, None
        if publication is not None:
            publication.stop()
        exporter, self.exporter = self.exporter, None
        if exporter is not None:
            exporter.stop()
