"""A Prometheus exporter per process: its own registry and a small HTTP server.

Every role process gets a fresh :class:`~prometheus_client.CollectorRegistry` (never the global
one, so several roles in one test process do not collide), with the process and platform
collectors, and serves it at ``http://HOST:PORT/metrics`` (port 0: the kernel picks; the URL is
then published in the store, see :mod:`elasticps.telemetry.endpoint`).

Most role metrics are *collectors* that read counters the role keeps anyway when Prometheus
scrapes, so the training hot path pays nothing for them (``trainer/telemetry.py``).

Every series a process serves carries its **identity labels**: ``job`` and ``role`` always,
``shard`` on a pserver once it holds a slot, ``trainer`` (the trainer's index) on a trainer
(:class:`IdentityRegistry`). None of them names a process: a restarted pserver or trainer
continues the series of its shard or index, and no query needs a join to know the job.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable, Iterable, Mapping
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

from elasticps.config import listen_error
from elasticps.version import __version__

log = logging.getLogger(__name__)

PREFIX = "elasticps_"
CONTENT_TYPE = CONTENT_TYPE_LATEST


class InfoCollector(Collector):
    """``elasticps_process_info{version} 1`` (plus the identity labels, as on every series)."""

    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily(f"{PREFIX}process_info", "The elasticps process behind this "
                                 "endpoint", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info


class IdentityRegistry(CollectorRegistry):
    """A registry whose every series carries ``identity`` (job, role, shard or trainer).

    Every collector is wrapped as it registers (a ``Histogram(..., registry=r)`` included), so
    the labels reach the process and platform collectors too, and a restricted scrape
    (``/metrics?name[]=...``) as well. ``identity`` is read at each scrape: a pserver adds its
    ``shard`` once it claimed a slot (:meth:`relabel`). A label a metric sets itself wins over
    an identity label of the same name (the trainer's RPC client counts by the ``shard`` it
    called).
    """

    def __init__(self, identity: Mapping[str, str]) -> None:
        super().__init__(auto_describe=True)
        self.identity: dict[str, str] = _checked(identity)
        self._wrappers: dict[Collector, _IdentityCollector] = {}

    def register(self, collector: Collector) -> None:
        wrapper = _IdentityCollector(collector, self)
        super().register(wrapper)
        self._wrappers[collector] = wrapper

    def unregister(self, collector: Collector) -> None:
        super().unregister(self._wrappers.pop(collector))

    def relabel(self, **labels: str) -> None:
        self.identity = {**self.identity, **_checked(labels)}


class _IdentityCollector(Collector):
    def __init__(self, inner: Collector, registry: IdentityRegistry) -> None:
        self.inner = inner
        self.registry = registry

    def describe(self) -> Iterable[Metric]:
        # what the registry checks names with: the inner's description, else (auto_describe)
        # one collection, as it would have done with the inner collector
        describe = getattr(self.inner, "describe", None)
        return list(describe() if describe is not None else self.inner.collect())

    def collect(self) -> Iterable[Metric]:
        identity = self.registry.identity
        for family in self.inner.collect():
            labelled = copy.copy(family)
            labelled.samples = [s._replace(labels={**identity, **s.labels})
                                for s in family.samples]
            yield labelled


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*\Z")


def _checked(labels: Mapping[str, str]) -> dict[str, str]:
    for name in labels:
        if not _LABEL_NAME.match(name) or name.startswith("__"):
            raise ValueError(f"{name!r} is not a Prometheus label name")
    return dict(labels)


def new_registry(identity: Mapping[str, str]) -> IdentityRegistry:
    """A registry with the process collectors and ``elasticps_process_info``, every series
    labelled with ``identity``."""
    registry = IdentityRegistry(identity)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR, InfoCollector()):
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
        try:
            self._server, self._thread = start_http_server(port, host, registry)
        except OSError as exc:
            raise listen_error("the Prometheus metrics", host, port, "PADDLE_METRICS_PORT",
                               exc) from exc
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
