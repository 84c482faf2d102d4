"""A Prometheus exporter per process: its own registry and a small HTTP server.

Every role process gets a fresh :class:`~prometheus_client.CollectorRegistry` (never the global
one, so several roles in one test process do not collide), with the process and platform
collectors, and serves it at ``http://HOST:PORT/metrics`` (port 0: the kernel picks; the URL is
then published in the store, see :mod:`elasticps.telemetry.endpoint`).

Most role metrics are *collectors* that read counters the role keeps anyway when Prometheus
scrapes, so the training hot path pays nothing for them (``trainer/telemetry.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

PREFIX = "elasticps_"
CONTENT_TYPE = CONTENT_TYPE_LATEST


class InfoCollector(Collector):
    """``elasticps_process_info{job, role, node} 1``: joins a scrape to the job's process."""

    def __init__(self, job: str, role: str, node: str) -> None:
        self.labels = {"job_name": job, "role": role, "node": node}

    def set_node(self, node: str) -> None:
        self.labels["node"] = node

    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily(f"{PREFIX}process_info", "The elasticps process behind this "
                                 "endpoint", labels=list(self.labels))
        info.add_metric(list(self.labels.values()), 1.0)
        yield info


def new_registry(info: InfoCollector) -> CollectorRegistry:
    """A registry with the process collectors and ``info`` (``elasticps_process_info``)."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR, info):
        registry.register(collector)
    return registry


class CallbackCollector(Collector):
    """A collector made of a function returning metric families (read at scrape time)."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        try:
            yield from self._collect()
        except Exception as exc:  # a scrape must never break the role
            log.debug("A metrics collector failed: %s", exc)


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text format."""
    return generate_latest(registry)


class MetricsExporter:
    """Serves ``registry`` at ``http://host:port/metrics`` from a daemon thread."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int = 0) -> None:
        self.registry = registry
        self._server: WSGIServer
        self._server, self._thread = start_http_server(port, host, registry)
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)
